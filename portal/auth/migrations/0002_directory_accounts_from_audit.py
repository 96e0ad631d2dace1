"""Mark the accounts a directory sign-in already changed (an ``identity.sync`` record
"directory sign-in ...") as the directory's. Directory accounts whose sign-ins never
changed anything left no record: the sweep marks those it finds in the directory
(``portal.auth.sweep``)."""

from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.db import migrations


def mark(apps, schema_editor):
    AuditRecord = apps.get_model("portal", "AuditRecord")
    DirectoryAccount = apps.get_model("portal_auth", "DirectoryAccount")
    User = apps.get_model("auth", "User")
    ids = {
        int(pk)
        for pk in AuditRecord.objects.filter(
            action="identity.sync", target_type="auth.user", reason__startswith="directory sign-in"
        ).values_list("target_id", flat=True)
        if pk.isdigit()
    }
    users = User.objects.filter(pk__in=ids, password__startswith=UNUSABLE_PASSWORD_PREFIX)
    DirectoryAccount.objects.bulk_create(
        [DirectoryAccount(user=user) for user in users], ignore_conflicts=True
    )


class Migration(migrations.Migration):
    dependencies = [
        ("portal_auth", "0001_initial"),
        ("portal", "0004_profile_time_zone"),
    ]

    operations = [migrations.RunPython(mark, migrations.RunPython.noop)]
