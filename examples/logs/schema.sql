-- steptrace's JSON lines in SQLite (examples/logs/load_sqlite.sh). Fields: docs/schema.md.
-- One row per line, whatever file it came from: `line_key` names the line, and loading a line whose key is
-- already there does nothing, so loading a file twice, or one run's lines from two copies, keeps one row.
--   step line:              ["step", run_id, rank, global_step]  (each start() draws a new run_id and counts
--                           global_step from 0; a rank writes one line per step)
--   end / stall / resumed:  [event, run_id, rank, timestamp, reason, report]  (reason tells an end at SIGTERM
--                           from the end at stop(), report a stall's 1st, 2nd… record, should they share a ms)
--   run record:             ["run", run_id, rank, from_step]  (a compact log's, line_detail=compact: the run's
--                           constant facts, written again before the step where one changed)
--   a line without run_id   (logs older than run_id): "text:" and the line itself, as only the same text can be
--                           told to be the same line; its run_id reads '?', as in steptrace-report.
-- `file` is the file the line was first loaded from.
CREATE TABLE IF NOT EXISTS lines(
  line_key TEXT NOT NULL UNIQUE,
  run_id TEXT NOT NULL,
  rank INTEGER,
  global_step INTEGER,
  event TEXT,
  file TEXT,
  line TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS lines_by_run ON lines(run_id, rank, global_step);
-- The run records alone (a few per run): the steps view looks up each line's record here, so a log whose
-- record is missing (cut, rotated) costs one probe per line, not a scan of the run's lines (issue #58).
CREATE INDEX IF NOT EXISTS lines_run_records ON lines(run_id, rank) WHERE event = 'run';

-- The views are made again at every load, so a database loaded by an older version gets today's.
-- Every view carries run_id and rank: two runs (or ranks) in one database never read as one.
DROP VIEW IF EXISTS steps;
-- Full lines (steptrace.step/1) and compact ones (steptrace.step/2) alike: what a compact line leaves to
-- its run record (hostname) comes from the run's record, what it names otherwise from its own fields.
CREATE VIEW steps AS SELECT
  s.run_id,
  s.rank,
  s.global_step AS step,
  s.file,
  json_extract(s.line, '$.schema') AS schema,
  coalesce(json_extract(s.line, '$.hostname'),
           (SELECT json_extract(r.line, '$.hostname') FROM lines AS r
            WHERE r.event = 'run' AND r.run_id = s.run_id AND r.rank IS s.rank LIMIT 1)) AS hostname,
  coalesce(json_extract(s.line, '$.timestamp'),
           strftime('%Y-%m-%dT%H:%M:%fZ', json_extract(s.line, '$.start_unix_ms') / 1000.0, 'unixepoch')) AS timestamp,
  json_extract(s.line, '$.step_time_ms') AS step_time_ms,
  json_extract(s.line, '$.tokens_per_second') AS tokens_per_second,
  json_extract(s.line, '$.estimated_mfu') AS mfu,
  json_extract(s.line, '$.gpu_utilization') AS gpu_utilization,
  json_extract(s.line, '$.sm_activity') AS sm_activity,
  coalesce(json_extract(s.line, '$.dataloader_wait_ms'), json_extract(s.line, '$.phases.input.host_ms')) AS dataloader_wait_ms,
  json_extract(s.line, '$.nccl_time_ms') AS nccl_time_ms,
  json_extract(s.line, '$.peak_memory_allocated') AS peak_memory_bytes,              -- full lines only
  json_extract(s.line, '$.memory.device_used_peak_bytes') AS device_used_peak_bytes,  -- both
  json_extract(s.line, '$.loss') AS loss,
  json_extract(s.line, '$.traced') AS traced,
  json_extract(s.line, '$.gpu_markers.pending_share') AS gpu_held_share,  -- markers: a lower bound of the busy share
  json_extract(s.line, '$.gpu_markers.span_ms') AS gpu_marker_span_ms,
  json_extract(s.line, '$.diagnosis.label') AS diagnosis,
  s.line
FROM lines AS s WHERE s.event IS NULL;

-- The records that end a run's lines (stop(), SIGTERM, exit): how each rank's run ended.
DROP VIEW IF EXISTS ends;
CREATE VIEW ends AS SELECT
  run_id,
  rank,
  file,
  json_extract(line, '$.reason') AS reason,
  json_extract(line, '$.timestamp') AS timestamp,
  json_extract(line, '$.last_global_step') AS last_step,
  json_extract(line, '$.lines_written') AS lines_written,
  json_extract(line, '$.lines_incomplete') AS lines_incomplete
FROM lines WHERE event = 'end';

-- One row per step and phase.
DROP VIEW IF EXISTS phases;
CREATE VIEW phases AS SELECT
  l.run_id,
  l.rank,
  l.global_step AS step,
  p.key AS phase,
  json_extract(p.value, '$.host_ms') AS host_ms,
  json_extract(p.value, '$.gpu.busy_ms') AS gpu_busy_ms,
  json_extract(p.value, '$.gpu.kernel_ms') AS gpu_kernel_ms,
  -- The phase's GPU time from its begin marker to its end marker (stream markers: every marked step,
  -- traced or not; a top-level phase of the step's thread).
  (SELECT json_extract(m.value, '$.span_ms') FROM json_each(l.line, '$.gpu_markers.phases') AS m
   WHERE m.key = p.key) AS gpu_marker_span_ms
FROM lines AS l, json_each(l.line, '$.phases') AS p
WHERE l.event IS NULL;

-- One row per run: its ranks, steps and time span, and how many of its ranks wrote an end record.
DROP VIEW IF EXISTS runs;
CREATE VIEW runs AS SELECT
  run_id,
  count(DISTINCT rank) AS ranks,
  count(*) FILTER (WHERE event IS NULL) AS step_lines,
  min(global_step) AS first_step,
  max(global_step) AS last_step,
  min(coalesce(json_extract(line, '$.timestamp'),
               strftime('%Y-%m-%dT%H:%M:%fZ', json_extract(line, '$.start_unix_ms') / 1000.0, 'unixepoch'))) AS first_timestamp,
  max(coalesce(json_extract(line, '$.timestamp'),
               strftime('%Y-%m-%dT%H:%M:%fZ', json_extract(line, '$.start_unix_ms') / 1000.0, 'unixepoch'))) AS last_timestamp,
  count(DISTINCT rank) FILTER (WHERE event = 'end') AS ranks_ended
FROM lines GROUP BY run_id;
