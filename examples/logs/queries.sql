-- Questions people ask of a run (sqlite3 steps.db < examples/logs/queries.sql).
.mode box
-- The ten slowest steps, and what held them back.
SELECT rank, step, round(step_time_ms, 2) AS step_ms, diagnosis, round(dataloader_wait_ms, 2) AS input_ms
FROM steps ORDER BY step_time_ms DESC LIMIT 10;
-- Where the time goes, per phase: mean host and GPU time per step.
SELECT phase, count(*) AS steps, round(avg(host_ms), 3) AS host_ms, round(avg(gpu_busy_ms), 3) AS gpu_busy_ms
FROM phases GROUP BY phase ORDER BY avg(host_ms) DESC;
-- What held the steps back, by how many steps.
SELECT diagnosis, count(*) AS steps FROM steps GROUP BY diagnosis ORDER BY count(*) DESC;
-- Per rank: mean step time and the slowest step, to find a straggler.
SELECT rank, count(*) AS steps, round(avg(step_time_ms), 3) AS mean_ms, round(max(step_time_ms), 3) AS max_ms
FROM steps GROUP BY rank ORDER BY mean_ms DESC;
