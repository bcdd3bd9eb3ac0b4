-- steptrace's JSON lines in SQLite (examples/logs/load_sqlite.sh). Fields: docs/schema.md.
CREATE TABLE IF NOT EXISTS lines(file TEXT, line TEXT);
CREATE VIEW IF NOT EXISTS steps AS SELECT
  file,
  json_extract(line, '$.rank') AS rank,
  json_extract(line, '$.hostname') AS hostname,
  json_extract(line, '$.global_step') AS step,
  json_extract(line, '$.timestamp') AS timestamp,
  json_extract(line, '$.step_time_ms') AS step_time_ms,
  json_extract(line, '$.tokens_per_second') AS tokens_per_second,
  json_extract(line, '$.estimated_mfu') AS mfu,
  json_extract(line, '$.gpu_utilization') AS gpu_utilization,
  json_extract(line, '$.sm_activity') AS sm_activity,
  json_extract(line, '$.dataloader_wait_ms') AS dataloader_wait_ms,
  json_extract(line, '$.nccl_time_ms') AS nccl_time_ms,
  json_extract(line, '$.peak_memory_allocated') AS peak_memory_bytes,
  json_extract(line, '$.loss') AS loss,
  json_extract(line, '$.traced') AS traced,
  json_extract(line, '$.diagnosis.label') AS diagnosis,
  line
FROM lines WHERE json_extract(line, '$.event') IS NULL;
-- The records that end a run's lines (stop(), SIGTERM, exit): how each rank's run ended.
CREATE VIEW IF NOT EXISTS ends AS SELECT
  file,
  json_extract(line, '$.rank') AS rank,
  json_extract(line, '$.reason') AS reason,
  json_extract(line, '$.timestamp') AS timestamp,
  json_extract(line, '$.last_global_step') AS last_step,
  json_extract(line, '$.lines_incomplete') AS lines_incomplete
FROM lines WHERE json_extract(line, '$.event') = 'end';
CREATE VIEW IF NOT EXISTS phases AS SELECT
  json_extract(l.line, '$.rank') AS rank,
  json_extract(l.line, '$.global_step') AS step,
  p.key AS phase,
  json_extract(p.value, '$.host_ms') AS host_ms,
  json_extract(p.value, '$.gpu.busy_ms') AS gpu_busy_ms,
  json_extract(p.value, '$.gpu.kernel_ms') AS gpu_kernel_ms
FROM lines AS l, json_each(l.line, '$.phases') AS p;
