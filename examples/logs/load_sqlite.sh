#!/usr/bin/env bash
# Loads steptrace's JSON lines into SQLite (its JSON functions: sqlite3 >= 3.38) for ad-hoc queries:
#   examples/logs/load_sqlite.sh steps.db steps-*.jsonl
#   sqlite3 steps.db < examples/logs/queries.sql
# Table `lines` holds each line once (schema.sql says what makes two lines the same), with its run_id, rank,
# step, event and the file it first came from; views `steps` (the fields people ask about first, nulls as
# SQL NULL), `phases` (one row per step and phase), `ends` (end records) and `runs` (one row per run), each
# with run_id and rank. Loading is idempotent: a file loaded again, or a copy of lines already loaded, adds
# nothing. Prints, per file, how many lines were new, how many were already in the database and how many
# were skipped (not a JSON object, e.g. a torn last line, or one with a repeated key; empty lines are not
# counted), then the database's
# lines and runs.
set -euo pipefail
db=${1:?usage: load_sqlite.sh DB LINES.jsonl...}; shift
here=$(cd "$(dirname "$0")" && pwd)
dbq=${db//\'/\'\'}  # names inside SQL string literals: ' doubled

# A line is loaded when it is a JSON object (a torn last line, a bare value are not) whose keys are each
# given once: readers differ on a repeated key (SQLite takes the first, Python the last), and a forged
# line repeating `run_id` would otherwise take a real line's key.
is_object="CASE WHEN json_valid(line) AND json_type(line) = 'object'
                THEN (SELECT count(*) = count(DISTINCT key) FROM json_each(line)) ELSE 0 END"
# Every object of temp table raw(file, line) into `lines`, unless its key (schema.sql) is there already.
insert="INSERT OR IGNORE INTO lines(line_key, run_id, rank, global_step, event, file, line)
SELECT CASE WHEN run_id IS NULL THEN 'text:' || line
            WHEN event IS NULL THEN json_array('step', run_id, rank, global_step)
            WHEN event = 'run' THEN json_array('run', run_id, rank, json_extract(line, '\$.from_step'))
            ELSE json_array(event, run_id, rank, json_extract(line, '\$.timestamp'),
                            json_extract(line, '\$.reason'), json_extract(line, '\$.report')) END,
       coalesce(run_id, '?'), rank, global_step, event, file, line
FROM (SELECT file, line, json_extract(line, '\$.run_id') AS run_id, json_extract(line, '\$.rank') AS rank,
             json_extract(line, '\$.global_step') AS global_step, json_extract(line, '\$.event') AS event
      FROM raw WHERE $is_object ORDER BY raw.rowid);"

# A database loaded before lines had keys (table lines(file, line)): its lines move into the keyed table,
# in one transaction (-bail: an error leaves the database as it was).
old=$(sqlite3 "$db" "SELECT count(*) = 1 FROM pragma_table_info('lines') WHERE name = 'file'
                     AND NOT EXISTS (SELECT 1 FROM pragma_table_info('lines') WHERE name = 'line_key')")
if [[ $old == 1 ]]; then
  { echo "BEGIN; DROP VIEW IF EXISTS steps; DROP VIEW IF EXISTS ends; DROP VIEW IF EXISTS phases;
          ALTER TABLE lines RENAME TO lines_unkeyed;"
    cat "$here/schema.sql"
    echo "CREATE TEMP TABLE raw AS SELECT file, line FROM lines_unkeyed ORDER BY rowid; $insert
          DROP TABLE lines_unkeyed; COMMIT;
          SELECT 'steptrace: $dbq: lines of an older load keyed: ' || count(*) || ' kept' FROM lines;"
  } | sqlite3 -bail "$db"
fi
sqlite3 "$db" < "$here/schema.sql"

for f in "$@"; do
  name=$(basename "$f"); name=${name//\'/\'\'}
  # The file on stdin (its name never parsed by sqlite3); ascii mode: no quoting rules, one record per
  # newline, the unit separator (never in a JSON line: control characters are escaped) between fields.
  sqlite3 "$db" ".mode ascii" ".separator \"\\037\" \"\\n\"" "CREATE TEMP TABLE input(line TEXT)" \
    ".import /dev/stdin input" \
    "CREATE TEMP TABLE raw AS SELECT '$name' AS file, line FROM input ORDER BY rowid" \
    "CREATE TEMP TABLE before AS SELECT (SELECT count(*) FROM lines) AS n" \
    "$insert" \
    "SELECT 'steptrace: $name: ' || added || ' new lines, ' || (objects - added) || ' already in $dbq, '
            || (read - objects) || ' skipped (not a JSON object)'
     FROM (SELECT (SELECT count(*) FROM lines) - before.n AS added, (SELECT count(*) FROM raw) AS read,
                  (SELECT count(*) FROM raw WHERE $is_object) AS objects FROM before)" \
    < "$f"
done
sqlite3 "$db" "SELECT 'steptrace: ' || count(*) || ' lines in $dbq, ' || count(DISTINCT run_id) || ' run(s)'
               FROM lines"
