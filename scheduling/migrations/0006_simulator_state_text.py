"""The simulator's state as JSON text, lz4-compressed where the server has lz4 (#16).

Saved whole every cycle (0.7 MB at 10,000 GPUs): as ``jsonb`` PostgreSQL parsed it and
compressed the result with pglz on every save; as text with lz4 it only compresses it,
fast (``scheduling.models.JSONTextField``). A server built without lz4 keeps pglz.
"""

from django.db import migrations

import scheduling.models

TABLE = "scheduling_simulatorstate"
LZ4 = f"""
DO $$
BEGIN
    EXECUTE 'ALTER TABLE {TABLE} ALTER COLUMN state SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported THEN
    NULL;  -- built without lz4: the default (pglz)
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0005_node_inference_gpus"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"ALTER TABLE {TABLE} ALTER COLUMN state TYPE text USING state::text",
                    f"ALTER TABLE {TABLE} ALTER COLUMN state TYPE jsonb USING state::jsonb",
                ),
                migrations.RunSQL(LZ4, migrations.RunSQL.noop),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="simulatorstate",
                    name="state",
                    field=scheduling.models.JSONTextField(),
                ),
            ],
        ),
    ]
