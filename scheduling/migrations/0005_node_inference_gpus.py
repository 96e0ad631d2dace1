from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0004_one_clock"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="inference_gpus",
            field=models.PositiveSmallIntegerField(
                default=0, help_text="GPUs serving online inference at the last applied plan"
            ),
        ),
    ]
