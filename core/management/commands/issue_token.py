from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from core import tokens


class Command(BaseCommand):
    help = "Print the API token of USER (created on first use, audited)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")

    def handle(self, username: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        self.stdout.write(tokens.issue_automation_token(user))
