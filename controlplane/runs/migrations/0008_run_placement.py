from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0007_run_tags"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="placement",
            field=models.JSONField(blank=True, default=dict, help_text=(
                "Where the scheduler put a GPU run when it admitted it: {worker, devices} (the worker's device indices, "
                "set as CUDA_VISIBLE_DEVICES for the run's processes); empty for a CPU run.")),
        ),
    ]
