# One clock (#15): alert times are cluster time (core.clock).

import core.clock
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('monitoring', '0002_metric_sample'),
    ]

    operations = [
        migrations.AlterField(
            model_name='alert',
            name='created_at',
            field=core.clock.ClusterTimeField(auto_now_add=True, help_text='cluster time'),
        ),
        migrations.AlterField(
            model_name='alert',
            name='updated_at',
            field=core.clock.ClusterTimeField(auto_now=True, help_text='cluster time'),
        ),
    ]
