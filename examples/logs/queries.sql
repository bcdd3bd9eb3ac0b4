-- Questions people ask of a run (sqlite3 steps.db < examples/logs/queries.sql). A database may hold several
-- runs (a log several start()s appended to, several jobs): every answer is given run by run.
.mode box
-- The runs in the database: ranks, steps, when, and how many ranks wrote an end record.
SELECT run_id, ranks, step_lines, first_step, last_step, first_timestamp, last_timestamp, ranks_ended
FROM runs ORDER BY first_timestamp;
-- The ten slowest steps, and what held them back.
SELECT run_id, rank, step, round(step_time_ms, 2) AS step_ms, diagnosis, round(dataloader_wait_ms, 2) AS input_ms
FROM steps ORDER BY step_time_ms DESC LIMIT 10;
-- Where the time goes, per run and phase: mean host and GPU time per step.
SELECT run_id, phase, count(*) AS steps, round(avg(host_ms), 3) AS host_ms, round(avg(gpu_busy_ms), 3) AS gpu_busy_ms
FROM phases GROUP BY run_id, phase ORDER BY run_id, avg(host_ms) DESC;
-- What held the steps back, per run, by how many steps.
SELECT run_id, diagnosis, count(*) AS steps FROM steps GROUP BY run_id, diagnosis ORDER BY run_id, count(*) DESC;
-- Per run and rank: mean step time and the slowest step, to find a straggler.
SELECT run_id, rank, count(*) AS steps, round(avg(step_time_ms), 3) AS mean_ms, round(max(step_time_ms), 3) AS max_ms
FROM steps GROUP BY run_id, rank ORDER BY run_id, mean_ms DESC;
