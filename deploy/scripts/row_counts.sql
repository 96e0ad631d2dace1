-- Rows per table of the portal's database, one "table|rows" line each (docs/deploy.md,
-- "Backups"): run it on the live database and on a restored copy, and diff the two.
--   docker-compose exec -T postgres psql -U portal -d portal -At < deploy/scripts/row_counts.sql
SELECT table_name || '|' || (xpath('/row/n/text()', query_to_xml(
           format('SELECT count(*) AS n FROM %I.%I', table_schema, table_name), false, true, '')
       ))[1]::text
FROM information_schema.tables
WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
ORDER BY table_name;
