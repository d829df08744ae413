# Cycles of bench/mysql_statement_cost.cpp: one line each, its name, " | ", then its statements
# separated by " ;; ".
# Run by bench/mysql.sh on the tables of its session-mode runs (table=bench_session), whose
# row 'run-key' its `dlock run` made. The floor: one round trip, then the bare pair.
SELECT 1 | SELECT 1
GET_LOCK+RELEASE_LOCK | SELECT GET_LOCK('rb/cost', 0) ;; SELECT RELEASE_LOCK('rb/cost')
# A cycle with no table row: the token from a cached sequence (one durable write per 100,000).
GET_LOCK+NEXTVAL, RELEASE_LOCK (no row) | SELECT IF(IS_USED_LOCK('rb/cost') <=> CONNECTION_ID() OR GET_LOCK('rb/cost', 0) = 1, NEXTVAL(bench_session_tokens), NULL) ;; SELECT RELEASE_LOCK('rb/cost')
# The least a memory-table row can cost: the token only, then the bare release.
token-only memory-table UPDATE with GET_LOCK, RELEASE_LOCK | UPDATE bench_session_session SET token = LAST_INSERT_ID(token + 1) WHERE name = 'run-key' AND GET_LOCK('rb/cost', 0) = 1 ;; SELECT RELEASE_LOCK('rb/cost')
# Session mode's own statements (src/backends/mysql/session_mode.cpp: take, then free).
session mode's take + free | UPDATE bench_session_session SET token = LAST_INSERT_ID(token + 1), hold_count = 1, owner = 'o', session_id = CONNECTION_ID(), acquired_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL 30000000 MICROSECOND, renewals = renewals + 1 WHERE name = 'run-key' AND (IS_USED_LOCK('rb/cost') <=> CONNECTION_ID() OR GET_LOCK('rb/cost', 0) = 1) AND NOT (owner <> '' AND expires_at > UTC_TIMESTAMP(6) AND (hold_count = 0 OR 0)) ;; UPDATE bench_session_session SET owner = '', expires_at = UTC_TIMESTAMP(6), hold_count = 0, session_id = 0 * RELEASE_LOCK('rb/cost') WHERE name = 'run-key' AND owner = 'o' AND token = LAST_INSERT_ID() AND hold_count = 1 AND session_id = CONNECTION_ID() AND IS_USED_LOCK('rb/cost') <=> CONNECTION_ID()
