-- The PostgreSQL store's statements, one per name (sodalite.store.sql_files.catalogue parses them at
-- import; the store runs SQL["name"]). Parameters are psycopg's, named: %(name)s. Tables are
-- those of the first schema of the connection's search_path; sodalite_messages, sodalite_counters
-- and sodalite_duplicate_history are rings of generations (see sodalite.store.postgres).

-- name: take_partition
-- Lock a partition's base row (creating it the first time) without writing a new version of it: ON
-- CONFLICT DO UPDATE locks the row it finds even when its WHERE clause updates nothing. A batch takes
-- the rows of every partition it numbers in first statements of their own, in one global order (no
-- deadlock between two batches, nor with a counter row of the current generation that an earlier
-- statement of the batch changed), so the statements that number see, each with its own READ
-- COMMITTED snapshot, what the previous holder committed.
INSERT INTO sodalite_partitions AS c (entity, partition, last_sequence_number)
        VALUES (%(e)s, %(p)s, 0)
        ON CONFLICT (entity, partition) DO UPDATE
        SET last_sequence_number = c.last_sequence_number
        WHERE false;

-- name: append
-- append, after take_partition: numbered above the partition's high-water mark, which the
-- current generation's counter row raises by the batch's size in the same statement.
WITH hw AS (SELECT GREATEST(coalesce(max(last_sequence_number), 0), %(p)s::bigint << 48) AS top
        FROM (SELECT last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(e)s AND partition = %(p)s
        UNION ALL SELECT last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(e)s AND partition = %(p)s) h),
    bump AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, hw.top + %(n)s, %(da)s, %(ds)s, %(dd)s, %(dz)s
        FROM hw
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time, message_id,
            session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count,
            state, durable, priority, annotations, annotation_count, tail, lock_token, locked_until,
            lock_owner)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, hw.top + m.ord, m.enqueued_time, m.message_id, m.session_id,
            m.partition_key, m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count,
            m.state, m.durable, m.priority, m.annotations, m.annotation_count, m.tail, NULL, NULL, NULL
        FROM hw, unnest(%(seq)s::bigint[], %(enqueued_time)s::bigint[], %(message_id)s::bytea[],
            %(session_id)s::bytea[], %(partition_key)s::bytea[], %(time_to_live)s::bigint[],
            %(expires_at)s::bigint[], %(scheduled_enqueue_time)s::bigint[], %(delivery_count)s::bigint[],
            %(state)s::smallint[], %(durable)s::boolean[], %(priority)s::bigint[], %(annotations)s::bytea[],
            %(annotation_count)s::bigint[], %(tail)s::bytea[]) WITH ORDINALITY AS m(sequence_number,
            enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at,
            scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count,
            tail, ord)
        RETURNING sequence_number;

-- name: append_gated
-- An append with a Gate: only the messages without an id, or whose id the batch's
-- ClaimMessageIds of the gate's partition took (marked with its claim), are numbered and stored;
-- the rows returned are (place in the batch, number) of those.
WITH hw AS (SELECT GREATEST(coalesce(max(last_sequence_number), 0), %(p)s::bigint << 48) AS top
        FROM (SELECT last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(e)s AND partition = %(p)s
        UNION ALL SELECT last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(e)s AND partition = %(p)s) h),
    g AS (SELECT m.*, row_number() OVER (ORDER BY m.ord) AS rn
        FROM unnest(%(seq)s::bigint[], %(enqueued_time)s::bigint[], %(message_id)s::bytea[],
            %(session_id)s::bytea[], %(partition_key)s::bytea[], %(time_to_live)s::bigint[],
            %(expires_at)s::bigint[], %(scheduled_enqueue_time)s::bigint[], %(delivery_count)s::bigint[],
            %(state)s::smallint[], %(durable)s::boolean[], %(priority)s::bigint[], %(annotations)s::bytea[],
            %(annotation_count)s::bigint[], %(tail)s::bytea[]) WITH ORDINALITY AS m(sequence_number,
            enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at,
            scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count,
            tail, ord)
        JOIN unnest(%(gid)s::bytea[]) WITH ORDINALITY AS gi(mid, ord) ON gi.ord = m.ord
        WHERE gi.mid IS NULL OR EXISTS (SELECT 1
        FROM sodalite_duplicate_history h
        WHERE h.entity = %(ge)s AND h.partition = %(gp)s AND h.message_id = gi.mid AND h.claim = %(claim)s)),
    ins AS (INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time,
            message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time,
            delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token,
            locked_until, lock_owner)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, hw.top + g.rn, g.enqueued_time, g.message_id, g.session_id,
            g.partition_key, g.time_to_live, g.expires_at, g.scheduled_enqueue_time, g.delivery_count,
            g.state, g.durable, g.priority, g.annotations, g.annotation_count, g.tail, NULL, NULL, NULL
        FROM hw, g
        RETURNING state, annotations, tail),
    bump AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, hw.top + x.n, x.a, x.s, x.d, x.z
        FROM hw, (SELECT count(*), count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 2),
            count(*) FILTER (WHERE state = 1), coalesce(sum(length(annotations) + length(tail)), 0)
        FROM ins) x(n, a, s, d, z)
        WHERE x.n > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT g.ord, hw.top + g.rn
        FROM hw, g;

-- name: append_numbered_by
-- append numbered by another partition's counter too (%(ne)s, %(np)s; Append.numbered_by: a dead
-- letter a topic's fan-out makes for a subscription, numbered by the subscription's partition),
-- after take_partition of both: numbered above both high-water marks, both raised to the last number
-- (so it takes nothing either partition holds or gave); the target's counter row takes the counts.
-- Rows (place, number).
WITH hw AS (SELECT GREATEST(a.top, b.top) AS top
        FROM (SELECT GREATEST(coalesce(max(last_sequence_number), 0), %(np)s::bigint << 48) AS top
        FROM (SELECT last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(ne)s AND partition = %(np)s
        UNION ALL SELECT last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(ne)s AND partition = %(np)s) h) a,
            (SELECT GREATEST(coalesce(max(last_sequence_number), 0), %(p)s::bigint << 48) AS top
        FROM (SELECT last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(e)s AND partition = %(p)s
        UNION ALL SELECT last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(e)s AND partition = %(p)s) h) b),
    g AS (SELECT m.*, row_number() OVER (ORDER BY m.ord) AS rn
        FROM unnest(%(seq)s::bigint[], %(enqueued_time)s::bigint[], %(message_id)s::bytea[],
            %(session_id)s::bytea[], %(partition_key)s::bytea[], %(time_to_live)s::bigint[],
            %(expires_at)s::bigint[], %(scheduled_enqueue_time)s::bigint[], %(delivery_count)s::bigint[],
            %(state)s::smallint[], %(durable)s::boolean[], %(priority)s::bigint[], %(annotations)s::bytea[],
            %(annotation_count)s::bigint[], %(tail)s::bytea[]) WITH ORDINALITY AS m(sequence_number,
            enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at,
            scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count,
            tail, ord)
        LEFT
        JOIN unnest(%(gid)s::bytea[]) WITH ORDINALITY AS gi(mid, ord) ON gi.ord = m.ord
        WHERE NOT %(gated)s OR gi.mid IS NULL OR EXISTS (SELECT 1
        FROM sodalite_duplicate_history h
        WHERE h.entity = %(ge)s AND h.partition = %(gp)s AND h.message_id = gi.mid AND h.claim = %(claim)s)),
    ins AS (INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time,
            message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time,
            delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token,
            locked_until, lock_owner)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, hw.top + g.rn, g.enqueued_time, g.message_id, g.session_id,
            g.partition_key, g.time_to_live, g.expires_at, g.scheduled_enqueue_time, g.delivery_count,
            g.state, g.durable, g.priority, g.annotations, g.annotation_count, g.tail, NULL, NULL, NULL
        FROM hw, g
        RETURNING state, annotations, tail),
    counted AS (SELECT count(*), count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 2),
            count(*) FILTER (WHERE state = 1), coalesce(sum(length(annotations) + length(tail)), 0)
        FROM ins),
    src AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(ne)s, %(np)s, hw.top + x.n, 0, 0, 0, 0
        FROM hw, counted x(n, a, s, d, z)
        WHERE x.n > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes),
    bump AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, hw.top + x.n, x.a, x.s, x.d, x.z
        FROM hw, counted x(n, a, s, d, z)
        WHERE x.n > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT g.ord, hw.top + g.rn
        FROM hw, g;

-- name: claim
WITH picked AS (SELECT sequence_number, row_number() OVER (ORDER BY sequence_number) AS ord
        FROM (SELECT m.sequence_number
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = %(state)s AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) AND (m.expires_at IS NULL OR m.expires_at > %(now)s)
        ORDER BY m.sequence_number
        LIMIT %(n)s FOR UPDATE SKIP LOCKED) s),
    tok AS (SELECT t, ord
        FROM unnest(%(tokens)s::uuid[]) WITH ORDINALITY AS x(t, ord))
UPDATE sodalite_messages m
        SET lock_token = tok.t, locked_until = %(until)s, lock_owner = %(owner)s,
            delivery_count = m.delivery_count + 1
        FROM picked
        JOIN tok
        USING (ord)
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(ARRAY(SELECT sequence_number
        FROM picked)) AND m.sequence_number = picked.sequence_number
        RETURNING m.sequence_number, m.enqueued_time, m.message_id, m.session_id, m.partition_key,
            m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count, m.state, m.durable,
            m.priority, m.annotations, m.annotation_count, m.tail, m.lock_token, m.locked_until, m.lock_owner;

-- name: claim_by_numbers
WITH picked AS (SELECT sequence_number, row_number() OVER (ORDER BY sequence_number) AS ord
        FROM (SELECT m.sequence_number
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = %(state)s AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) AND (m.expires_at IS NULL OR m.expires_at > %(now)s) AND m.sequence_number = ANY(%(seqs)s::bigint[])
        ORDER BY m.sequence_number
        LIMIT %(n)s FOR UPDATE SKIP LOCKED) s),
    tok AS (SELECT t, ord
        FROM unnest(%(tokens)s::uuid[]) WITH ORDINALITY AS x(t, ord))
UPDATE sodalite_messages m
        SET lock_token = tok.t, locked_until = %(until)s, lock_owner = %(owner)s,
            delivery_count = m.delivery_count + 1
        FROM picked
        JOIN tok
        USING (ord)
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(ARRAY(SELECT sequence_number
        FROM picked)) AND m.sequence_number = picked.sequence_number
        RETURNING m.sequence_number, m.enqueued_time, m.message_id, m.session_id, m.partition_key,
            m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count, m.state, m.durable,
            m.priority, m.annotations, m.annotation_count, m.tail, m.lock_token, m.locked_until, m.lock_owner;

-- name: claim_in_session
WITH picked AS (SELECT sequence_number, row_number() OVER (ORDER BY sequence_number) AS ord
        FROM (SELECT m.sequence_number
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = %(state)s AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) AND (m.expires_at IS NULL OR m.expires_at > %(now)s) AND m.session_id = %(sid)s
        ORDER BY m.sequence_number
        LIMIT %(n)s FOR UPDATE SKIP LOCKED) s),
    tok AS (SELECT t, ord
        FROM unnest(%(tokens)s::uuid[]) WITH ORDINALITY AS x(t, ord))
UPDATE sodalite_messages m
        SET lock_token = tok.t, locked_until = %(until)s, lock_owner = %(owner)s,
            delivery_count = m.delivery_count + 1
        FROM picked
        JOIN tok
        USING (ord)
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(ARRAY(SELECT sequence_number
        FROM picked)) AND m.sequence_number = picked.sequence_number
        RETURNING m.sequence_number, m.enqueued_time, m.message_id, m.session_id, m.partition_key,
            m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count, m.state, m.durable,
            m.priority, m.annotations, m.annotation_count, m.tail, m.lock_token, m.locked_until, m.lock_owner;

-- name: claim_in_session_by_numbers
WITH picked AS (SELECT sequence_number, row_number() OVER (ORDER BY sequence_number) AS ord
        FROM (SELECT m.sequence_number
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = %(state)s AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) AND (m.expires_at IS NULL OR m.expires_at > %(now)s) AND m.session_id = %(sid)s AND m.sequence_number = ANY(%(seqs)s::bigint[])
        ORDER BY m.sequence_number
        LIMIT %(n)s FOR UPDATE SKIP LOCKED) s),
    tok AS (SELECT t, ord
        FROM unnest(%(tokens)s::uuid[]) WITH ORDINALITY AS x(t, ord))
UPDATE sodalite_messages m
        SET lock_token = tok.t, locked_until = %(until)s, lock_owner = %(owner)s,
            delivery_count = m.delivery_count + 1
        FROM picked
        JOIN tok
        USING (ord)
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(ARRAY(SELECT sequence_number
        FROM picked)) AND m.sequence_number = picked.sequence_number
        RETURNING m.sequence_number, m.enqueued_time, m.message_id, m.session_id, m.partition_key,
            m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count, m.state, m.durable,
            m.priority, m.annotations, m.annotation_count, m.tail, m.lock_token, m.locked_until, m.lock_owner;

-- name: complete
WITH i AS (SELECT *
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(code)s::smallint[], %(ann)s::bytea[],
            %(annc)s::bigint[], %(tl)s::bytea[], %(reset)s::boolean[], %(enq)s::bigint[], %(exp)s::bigint[],
            %(back)s::boolean[]) WITH ORDINALITY AS i(seq, tok, code, ann, annc, tl, reset, enq, exp, back,
            ord)),
    d AS (DELETE
        FROM sodalite_messages m
        USING i
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq AND m.lock_token = i.tok AND m.locked_until > %(now)s
        RETURNING m.sequence_number, -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds,
            -(m.state = 1)::int AS dd, -(length(m.annotations) + length(m.tail)) AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT sequence_number
        FROM d;

-- name: complete_merged
-- Several Settle operations of one partition, back to back in a batch, all COMPLETE (a group commit
-- of receivers' completes): one statement, each item fenced at its own operation's now.
WITH i AS (SELECT *
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(nows)s::bigint[]) AS i(seq, tok, now)),
    d AS (DELETE
        FROM sodalite_messages m
        USING i
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq AND m.lock_token = i.tok AND m.locked_until > i.now
        RETURNING m.sequence_number, -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds,
            -(m.state = 1)::int AS dd, -(length(m.annotations) + length(m.tail)) AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT sequence_number
        FROM d;

-- name: unlock
-- ABANDON, RELEASE and DEFER clear the lock; RELEASE gives the delivery back, DEFER defers.
WITH i AS (SELECT *
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(code)s::smallint[], %(ann)s::bytea[],
            %(annc)s::bigint[], %(tl)s::bytea[], %(reset)s::boolean[], %(enq)s::bigint[], %(exp)s::bigint[],
            %(back)s::boolean[]) WITH ORDINALITY AS i(seq, tok, code, ann, annc, tl, reset, enq, exp, back,
            ord)),
    old AS (SELECT m.sequence_number, m.state, length(m.annotations) + length(m.tail) AS size, i.code, i.ann,
            i.annc, i.tl
        FROM sodalite_messages m
        JOIN i ON m.sequence_number = i.seq
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.lock_token = i.tok AND m.locked_until > %(now)s FOR UPDATE OF m),
    upd AS (UPDATE sodalite_messages m
        SET lock_token = NULL, locked_until = NULL, lock_owner = NULL,
            delivery_count = CASE WHEN old.code IN (1, 2) THEN GREATEST(m.delivery_count - 1,
            0) ELSE m.delivery_count END, state = CASE WHEN old.code = 2 THEN 1 ELSE m.state END,
            annotations = coalesce(old.ann, m.annotations),
            annotation_count = CASE WHEN old.ann IS NULL THEN m.annotation_count ELSE old.annc END,
            tail = coalesce(old.tl, m.tail)
        FROM old
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = old.sequence_number
        RETURNING m.sequence_number, (m.state = 0)::int - (old.state = 0)::int AS da,
            (m.state = 2)::int - (old.state = 2)::int AS ds, (m.state = 1)::int - (old.state = 1)::int AS dd,
            length(m.annotations) + length(m.tail) - old.size AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM upd) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT sequence_number
        FROM upd;

-- name: restore
-- Restore: rows put back under their own numbers (each number once, none the partition holds in any
-- generation), unlocked, counted in the current generation's counter row. Returns the numbers put back.
WITH fresh AS (SELECT DISTINCT ON (m.sequence_number) m.*
        FROM unnest(%(seq)s::bigint[], %(enqueued_time)s::bigint[], %(message_id)s::bytea[],
            %(session_id)s::bytea[], %(partition_key)s::bytea[], %(time_to_live)s::bigint[],
            %(expires_at)s::bigint[], %(scheduled_enqueue_time)s::bigint[], %(delivery_count)s::bigint[],
            %(state)s::smallint[], %(durable)s::boolean[], %(priority)s::bigint[], %(annotations)s::bytea[],
            %(annotation_count)s::bigint[], %(tail)s::bytea[]) WITH ORDINALITY AS m(sequence_number,
            enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at,
            scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count,
            tail, ord)
        WHERE m.sequence_number > 0 AND NOT EXISTS (SELECT 1
        FROM sodalite_messages t
        WHERE t.entity = %(e)s AND t.partition = %(p)s AND t.sequence_number = m.sequence_number)
        ORDER BY m.sequence_number, m.ord),
    ins AS (INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time,
            message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time,
            delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token,
            locked_until, lock_owner)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, fresh.sequence_number, fresh.enqueued_time, fresh.message_id,
            fresh.session_id, fresh.partition_key, fresh.time_to_live, fresh.expires_at,
            fresh.scheduled_enqueue_time, fresh.delivery_count, fresh.state, fresh.durable, fresh.priority,
            fresh.annotations, fresh.annotation_count, fresh.tail, NULL, NULL, NULL
        FROM fresh
        RETURNING sequence_number, state, annotations, tail),
    bump AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, x.top, x.a, x.s, x.d, x.z
        FROM (SELECT count(*), max(sequence_number), count(*) FILTER (WHERE state = 0),
            count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 1),
            coalesce(sum(length(annotations) + length(tail)), 0)
        FROM ins) x(n, top, a, s, d, z)
        WHERE x.n > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT sequence_number
        FROM ins;

-- name: dead_letter
WITH i AS (SELECT *
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(code)s::smallint[], %(ann)s::bytea[],
            %(annc)s::bigint[], %(tl)s::bytea[], %(reset)s::boolean[], %(enq)s::bigint[], %(exp)s::bigint[],
            %(back)s::boolean[]) WITH ORDINALITY AS i(seq, tok, code, ann, annc, tl, reset, enq, exp, back,
            ord)),
    d AS (DELETE
        FROM sodalite_messages m
        USING i
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq AND m.lock_token = i.tok AND m.locked_until > %(now)s
        RETURNING i.ord, m.sequence_number AS old_seq, coalesce(i.enq, m.enqueued_time) AS enqueued_time,
            m.message_id, m.session_id, m.partition_key, m.time_to_live, i.exp AS expires_at,
            m.scheduled_enqueue_time,
            CASE WHEN i.reset THEN 0 WHEN i.back THEN GREATEST(m.delivery_count - 1,
            0) ELSE m.delivery_count END AS delivery_count, m.durable, m.priority, coalesce(i.ann,
            m.annotations) AS annotations,
            CASE WHEN i.ann IS NULL THEN m.annotation_count ELSE i.annc END AS annotation_count,
            coalesce(i.tl, m.tail) AS tail, -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds,
            -(m.state = 1)::int AS dd, -(length(m.annotations) + length(m.tail)) AS dz),
    src AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0) AND NOT %(same)s
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes),
    hw AS (SELECT GREATEST(coalesce(max(last_sequence_number), 0), %(tp)s::bigint << 48) AS top
        FROM (SELECT last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(te)s AND partition = %(tp)s
        UNION ALL SELECT last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(te)s AND partition = %(tp)s) h),
    tk AS (SELECT d.*, %(keep)s AND EXISTS (SELECT 1
        FROM sodalite_messages t
        WHERE t.entity = %(te)s AND t.partition = %(tp)s AND t.sequence_number = d.old_seq) AS taken
        FROM d),
    nums AS (SELECT tk.*,
            CASE WHEN NOT %(keep)s THEN hw.top + row_number() OVER (ORDER BY tk.ord) WHEN tk.taken THEN GREATEST(hw.top, max(tk.old_seq) OVER ()) + sum(tk.taken::int) OVER (ORDER BY tk.ord ROWS UNBOUNDED PRECEDING) ELSE tk.old_seq END AS new_seq
        FROM tk, hw),
    tgt AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(te)s, %(tp)s, max(new_seq),
            count(*) + CASE WHEN %(same)s THEN sum(da) ELSE 0 END,
            CASE WHEN %(same)s THEN sum(ds) ELSE 0 END, CASE WHEN %(same)s THEN sum(dd) ELSE 0 END,
            coalesce(sum(length(annotations) + length(tail)), 0) + CASE WHEN %(same)s THEN sum(dz) ELSE 0 END
        FROM nums HAVING count(*) > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes),
    ins AS (INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time,
            message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time,
            delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token,
            locked_until, lock_owner)
SELECT (SELECT generation
        FROM sodalite_ring), %(te)s, %(tp)s, new_seq, enqueued_time, message_id, session_id, partition_key,
            time_to_live, expires_at, scheduled_enqueue_time, delivery_count, 0, durable, priority,
            annotations, annotation_count, tail, NULL, NULL, NULL
        FROM nums)
SELECT old_seq, new_seq
        FROM nums;

-- name: move_to
WITH i AS (SELECT *
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(code)s::smallint[], %(ann)s::bytea[],
            %(annc)s::bigint[], %(tl)s::bytea[], %(reset)s::boolean[], %(enq)s::bigint[], %(exp)s::bigint[],
            %(back)s::boolean[]) WITH ORDINALITY AS i(seq, tok, code, ann, annc, tl, reset, enq, exp, back,
            ord)),
    d AS (DELETE
        FROM sodalite_messages m
        USING i
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq AND (m.lock_token IS NULL OR m.locked_until <= %(now)s)
        RETURNING i.ord, m.sequence_number AS old_seq, coalesce(i.enq, m.enqueued_time) AS enqueued_time,
            m.message_id, m.session_id, m.partition_key, m.time_to_live, i.exp AS expires_at,
            m.scheduled_enqueue_time,
            CASE WHEN i.reset THEN 0 WHEN i.back THEN GREATEST(m.delivery_count - 1,
            0) ELSE m.delivery_count END AS delivery_count, m.durable, m.priority, coalesce(i.ann,
            m.annotations) AS annotations,
            CASE WHEN i.ann IS NULL THEN m.annotation_count ELSE i.annc END AS annotation_count,
            coalesce(i.tl, m.tail) AS tail, -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds,
            -(m.state = 1)::int AS dd, -(length(m.annotations) + length(m.tail)) AS dz),
    src AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0) AND NOT %(same)s
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes),
    hw AS (SELECT GREATEST(coalesce(max(last_sequence_number), 0), %(tp)s::bigint << 48) AS top
        FROM (SELECT last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(te)s AND partition = %(tp)s
        UNION ALL SELECT last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(te)s AND partition = %(tp)s) h),
    tk AS (SELECT d.*, %(keep)s AND EXISTS (SELECT 1
        FROM sodalite_messages t
        WHERE t.entity = %(te)s AND t.partition = %(tp)s AND t.sequence_number = d.old_seq) AS taken
        FROM d),
    nums AS (SELECT tk.*,
            CASE WHEN NOT %(keep)s THEN hw.top + row_number() OVER (ORDER BY tk.ord) WHEN tk.taken THEN GREATEST(hw.top, max(tk.old_seq) OVER ()) + sum(tk.taken::int) OVER (ORDER BY tk.ord ROWS UNBOUNDED PRECEDING) ELSE tk.old_seq END AS new_seq
        FROM tk, hw),
    tgt AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(te)s, %(tp)s, max(new_seq),
            count(*) + CASE WHEN %(same)s THEN sum(da) ELSE 0 END,
            CASE WHEN %(same)s THEN sum(ds) ELSE 0 END, CASE WHEN %(same)s THEN sum(dd) ELSE 0 END,
            coalesce(sum(length(annotations) + length(tail)), 0) + CASE WHEN %(same)s THEN sum(dz) ELSE 0 END
        FROM nums HAVING count(*) > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes),
    ins AS (INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time,
            message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time,
            delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token,
            locked_until, lock_owner)
SELECT (SELECT generation
        FROM sodalite_ring), %(te)s, %(tp)s, new_seq, enqueued_time, message_id, session_id, partition_key,
            time_to_live, expires_at, scheduled_enqueue_time, delivery_count, 0, durable, priority,
            annotations, annotation_count, tail, NULL, NULL, NULL
        FROM nums)
SELECT old_seq, new_seq
        FROM nums;

-- name: move_away
WITH i AS (SELECT *
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(code)s::smallint[], %(ann)s::bytea[],
            %(annc)s::bigint[], %(tl)s::bytea[], %(reset)s::boolean[], %(enq)s::bigint[], %(exp)s::bigint[],
            %(back)s::boolean[]) WITH ORDINALITY AS i(seq, tok, code, ann, annc, tl, reset, enq, exp, back,
            ord)),
    d AS (DELETE
        FROM sodalite_messages m
        USING i
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq AND (m.lock_token IS NULL OR m.locked_until <= %(now)s)
        RETURNING m.sequence_number, -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds,
            -(m.state = 1)::int AS dd, -(length(m.annotations) + length(m.tail)) AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT sequence_number, sequence_number
        FROM d;

-- name: renew
UPDATE sodalite_messages m
        SET locked_until = %(until)s
        FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[]) AS i(seq, tok)
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq AND m.lock_token = i.tok AND m.locked_until > %(now)s
        RETURNING m.sequence_number;

-- name: activate
WITH due AS (SELECT m.sequence_number
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = 2 AND m.scheduled_enqueue_time <= %(now)s
        ORDER BY m.scheduled_enqueue_time, m.sequence_number
        LIMIT %(n)s FOR UPDATE SKIP LOCKED),
    upd AS (UPDATE sodalite_messages m
        SET state = 0
        FROM due
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(ARRAY(SELECT sequence_number
        FROM due)) AND m.sequence_number = due.sequence_number
        RETURNING m.sequence_number, m.enqueued_time, m.message_id, m.session_id, m.partition_key,
            m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count, m.state, m.durable,
            m.priority, m.annotations, m.annotation_count, m.tail, m.lock_token, m.locked_until,
            m.lock_owner),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, count(*), -count(*), 0, 0
        FROM upd HAVING count(*) > 0
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT *
        FROM upd;

-- name: purge_all
WITH d AS (DELETE
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND (m.lock_token IS NULL OR m.locked_until <= %(now)s)
        RETURNING -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds, -(m.state = 1)::int AS dd,
            -(length(m.annotations) + length(m.tail)) AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT count(*)
        FROM d;

-- name: purge_through
WITH d AS (DELETE
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) AND m.sequence_number <= %(through)s
        RETURNING -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds, -(m.state = 1)::int AS dd,
            -(length(m.annotations) + length(m.tail)) AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT count(*)
        FROM d;

-- name: cancel_scheduled
-- CancelScheduled, all or none in one statement: the rows named that are SCHEDULED and unlocked are
-- locked (FOR UPDATE: a node activating or cancelling one at the same moment goes first, and the row,
-- read again after its commit, no longer qualifies); the numbers asked that none of them is are
-- returned, in the order asked, and the rows are deleted (and counted off) only when there is none.
WITH asked AS (SELECT DISTINCT ON (seq) seq, ord
        FROM unnest(%(seq)s::bigint[]) WITH ORDINALITY AS a(seq, ord)
        ORDER BY seq, ord),
    found AS (SELECT m.sequence_number
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.state = 2 AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) FOR UPDATE OF m),
    missing AS (SELECT asked.seq, asked.ord
        FROM asked
        WHERE NOT EXISTS (SELECT 1
        FROM found
        WHERE found.sequence_number = asked.seq)),
    d AS (DELETE
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.sequence_number = ANY(ARRAY(SELECT sequence_number
        FROM found)) AND NOT EXISTS (SELECT 1
        FROM missing)
        RETURNING -(m.state = 0)::int AS da, -(m.state = 2)::int AS ds, -(m.state = 1)::int AS dd,
            -(length(m.annotations) + length(m.tail)) AS dz),
    adj AS (INSERT INTO sodalite_counters AS c (generation, entity, partition, last_sequence_number, active,
            scheduled, deferred, size_in_bytes)
SELECT (SELECT generation
        FROM sodalite_ring), %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z
        FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d,
            coalesce(sum(dz), 0) AS z
        FROM d) x
        WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0)
        ON CONFLICT (entity, partition, generation) DO UPDATE
        SET last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number),
            active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled,
            deferred = c.deferred + excluded.deferred,
            size_in_bytes = c.size_in_bytes + excluded.size_in_bytes)
SELECT seq
        FROM missing
        ORDER BY ord;

-- name: claim_named_session
INSERT INTO sodalite_session_locks AS s (entity, partition, session_id, token, locked_until, owner)
        VALUES (%(e)s, %(p)s, %(sid)s, %(tok)s, %(until)s, %(owner)s)
        ON CONFLICT (entity, partition, session_id) DO UPDATE
        SET token = excluded.token, locked_until = excluded.locked_until, owner = excluded.owner
        WHERE s.locked_until <= %(now)s
        RETURNING s.session_id;

-- name: claim_next_session
-- The session, not locked, of the lowest-numbered ACTIVE, unlocked, unexpired message.
WITH cand AS (SELECT m.session_id
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = 0 AND m.session_id IS NOT NULL AND (m.lock_token IS NULL OR m.locked_until <= %(now)s) AND (m.expires_at IS NULL OR m.expires_at > %(now)s) AND NOT EXISTS (SELECT 1
        FROM sodalite_session_locks s
        WHERE s.entity = m.entity AND s.partition = m.partition AND s.session_id = m.session_id AND s.locked_until > %(now)s)
        ORDER BY m.sequence_number
        LIMIT 1)
INSERT INTO sodalite_session_locks AS s (entity, partition, session_id, token, locked_until, owner)
SELECT %(e)s, %(p)s, cand.session_id, %(tok)s, %(until)s, %(owner)s
        FROM cand
        ON CONFLICT (entity, partition, session_id) DO UPDATE
        SET token = excluded.token, locked_until = excluded.locked_until, owner = excluded.owner
        WHERE s.locked_until <= %(now)s
        RETURNING s.session_id;

-- name: renew_session
UPDATE sodalite_session_locks
        SET locked_until = %(until)s
        WHERE entity = %(e)s AND partition = %(p)s AND session_id = %(sid)s AND token = %(tok)s AND locked_until > %(now)s
        RETURNING 1;

-- name: release_session
DELETE
        FROM sodalite_session_locks
        WHERE entity = %(e)s AND partition = %(p)s AND session_id = %(sid)s AND token = %(tok)s
        RETURNING 1;

-- name: record_activity
INSERT INTO sodalite_activity AS a (entity, node, last_activity, receivers, refreshed_at)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (entity, node) DO UPDATE
        SET last_activity = greatest(a.last_activity, excluded.last_activity),
            receivers = excluded.receivers, refreshed_at = excluded.refreshed_at;

-- name: delete_idle
-- Deletes the definition only if no registration says the entity is in use; a second sweeper's
-- DELETE waits for the first's row lock and then finds the row gone (deleted once).
WITH busy AS (SELECT 1
        FROM sodalite_activity
        WHERE entity = %(k)s AND (last_activity > %(active)s OR (receivers > 0 AND refreshed_at > %(live)s))
        LIMIT 1),
    gone AS (DELETE
        FROM sodalite_entities
        WHERE path_key = %(k)s AND NOT EXISTS (SELECT 1
        FROM busy)
        RETURNING 1),
    regs AS (DELETE
        FROM sodalite_activity
        WHERE entity = %(k)s AND EXISTS (SELECT 1
        FROM gone))
SELECT count(*)
        FROM gone;

-- name: add_rule
-- Added after the subscription's other rules only when no rule of that name exists: a concurrent
-- insert of the same key waits for the first to commit, then finds the conflict (one of two succeeds).
INSERT INTO sodalite_rules (subscription, name_key, name, position, rule)
SELECT %(s)s, %(k)s, %(n)s, coalesce(max(position), 0) + 1, %(rule)s
        FROM sodalite_rules
        WHERE subscription = %(s)s
        ON CONFLICT (subscription, name_key) DO NOTHING
        RETURNING 1;

-- name: replace_rule
UPDATE sodalite_rules
        SET name = %(n)s, rule = %(rule)s
        WHERE subscription = %(s)s AND name_key = %(k)s
        RETURNING 1;

-- name: delete_rule
DELETE
        FROM sodalite_rules
        WHERE subscription = %(s)s AND name_key = %(k)s
        RETURNING 1;

-- name: delete_rules
DELETE
        FROM sodalite_rules
        WHERE subscription = %s;

-- name: put_rule_at
INSERT INTO sodalite_rules (subscription, name_key, name, position, rule)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (subscription, name_key) DO UPDATE
        SET name = excluded.name, position = excluded.position, rule = excluded.rule;

-- name: select_rules
SELECT subscription, rule
        FROM sodalite_rules
        ORDER BY subscription, position, name_key;

-- name: put_entity
INSERT INTO sodalite_entities (path_key, path, kind, properties)
        VALUES (%s, %s, %s, %s)
        ON CONFLICT (path_key) DO UPDATE
        SET path = excluded.path, kind = excluded.kind, properties = excluded.properties;

-- name: remember_id
-- An upsert in the history's current generation; the id's rows in other generations go (the new
-- time is the id's time, even an earlier one).
WITH old AS (DELETE
        FROM sodalite_duplicate_history
        WHERE entity = %(e)s AND partition = %(p)s AND message_id = %(mid)s AND generation <> (SELECT history_generation
        FROM sodalite_ring))
INSERT INTO sodalite_duplicate_history AS h (generation, entity, partition, message_id, seen_at)
        VALUES ((SELECT history_generation
        FROM sodalite_ring), %(e)s, %(p)s, %(mid)s, %(at)s)
        ON CONFLICT (entity, partition, message_id, generation) DO UPDATE
        SET seen_at = excluded.seen_at, claim = NULL;

-- name: forget_ids
DELETE
        FROM sodalite_duplicate_history
        WHERE entity = %(e)s AND partition = %(p)s AND message_id = ANY(%(ids)s::bytea[]) AND (%(before)s::bigint IS NULL OR seen_at < %(before)s::bigint);

-- name: prune_ids
DELETE
        FROM sodalite_duplicate_history
        WHERE entity = %(e)s AND partition = %(p)s AND seen_at < %(before)s;

-- name: claim_ids
-- ClaimMessageIds, after take_partition of its partition (so of two batches taking one id, the
-- second's statement sees the first's row): the ids not seen since ``since`` (the first of each) are
-- written to the current generation, marked with the claim; the rows returned name their places.
WITH i AS (SELECT DISTINCT ON (mid) mid, ord
        FROM unnest(%(ids)s::bytea[]) WITH ORDINALITY AS u(mid, ord)
        ORDER BY mid, ord),
    fresh AS (SELECT i.mid, i.ord
        FROM i
        WHERE NOT EXISTS (SELECT 1
        FROM sodalite_duplicate_history h
        WHERE h.entity = %(e)s AND h.partition = %(p)s AND h.message_id = i.mid AND h.seen_at >= %(since)s)),
    ins AS (INSERT INTO sodalite_duplicate_history AS h (generation, entity, partition, message_id, seen_at,
            claim)
SELECT (SELECT history_generation
        FROM sodalite_ring), %(e)s, %(p)s, fresh.mid, %(now)s, %(claim)s
        FROM fresh
        ON CONFLICT (entity, partition, message_id, generation) DO UPDATE
        SET seen_at = excluded.seen_at, claim = excluded.claim)
SELECT ord
        FROM fresh;

-- name: put_session_state
INSERT INTO sodalite_session_states (entity, partition, session_id, state, updated_at)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (entity, partition, session_id) DO UPDATE
        SET state = excluded.state, updated_at = excluded.updated_at;

-- name: clear_session_state
DELETE
        FROM sodalite_session_states
        WHERE entity = %s AND partition = %s AND session_id = %s;

-- name: remember_move_key
INSERT INTO sodalite_move_keys (entity, partition, move_key)
        VALUES (%s, %s, %s)
        ON CONFLICT DO NOTHING;

-- name: forget_move_key
DELETE
        FROM sodalite_move_keys
        WHERE entity = %s AND partition = %s AND move_key = %s;

-- name: delete_entity_rows_messages
-- An entity's own partitions and its sub-queues' ('<path>/$...'): bytewise, '$' < '%'.
DELETE
        FROM sodalite_messages
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: delete_entity_rows_partitions
DELETE
        FROM sodalite_partitions
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: delete_entity_rows_counters
DELETE
        FROM sodalite_counters
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: delete_entity_rows_duplicate_history
DELETE
        FROM sodalite_duplicate_history
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: delete_entity_rows_session_states
DELETE
        FROM sodalite_session_states
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: delete_entity_rows_move_keys
DELETE
        FROM sodalite_move_keys
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: delete_entity_rows_session_locks
DELETE
        FROM sodalite_session_locks
        WHERE entity = %s OR (entity >= %s AND entity < %s);

-- name: select_history
SELECT message_id, max(seen_at) AS at
        FROM sodalite_duplicate_history
        WHERE entity = %s AND partition = %s
        GROUP BY message_id
        ORDER BY at, message_id;

-- name: select_session_states
SELECT session_id, state, updated_at
        FROM sodalite_session_states
        WHERE entity = %s AND partition = %s
        ORDER BY session_id;

-- name: select_move_keys
SELECT move_key
        FROM sodalite_move_keys
        WHERE entity = %s AND partition = %s
        ORDER BY move_key;

-- name: select_counts
SELECT coalesce(sum(active), 0), coalesce(sum(scheduled), 0), coalesce(sum(deferred), 0),
            coalesce(sum(size_in_bytes), 0), coalesce(max(last_sequence_number), 0),
            (SELECT min(sequence_number)
        FROM sodalite_messages
        WHERE entity = %(e)s AND partition = %(p)s)
        FROM (SELECT active, scheduled, deferred, size_in_bytes, last_sequence_number
        FROM sodalite_partitions
        WHERE entity = %(e)s AND partition = %(p)s
        UNION ALL SELECT active, scheduled, deferred, size_in_bytes, last_sequence_number
        FROM sodalite_counters
        WHERE entity = %(e)s AND partition = %(p)s) c;

-- name: select_counts_many
SELECT coalesce(sum(c.active), 0), coalesce(sum(c.scheduled), 0), coalesce(sum(c.deferred), 0),
            coalesce(sum(c.size_in_bytes), 0), coalesce(max(c.last_sequence_number), 0)
        FROM unnest(%(es)s::bytea[], %(ps)s::bigint[]) WITH ORDINALITY AS r(e, p, i)
        LEFT
        JOIN LATERAL (SELECT active, scheduled, deferred, size_in_bytes, last_sequence_number
        FROM sodalite_partitions
        WHERE entity = r.e AND partition = r.p
        UNION ALL SELECT active, scheduled, deferred, size_in_bytes, last_sequence_number
        FROM sodalite_counters
        WHERE entity = r.e AND partition = r.p) c ON true
        GROUP BY r.i
        ORDER BY r.i;

-- name: select_fetch
SELECT sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at,
            scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count,
            tail, lock_token, locked_until, lock_owner
        FROM sodalite_messages
        WHERE entity = %(e)s AND partition = %(p)s AND sequence_number = ANY(%(seq)s::bigint[])
        ORDER BY sequence_number;

-- name: select_next_due
SELECT LEAST((SELECT min(scheduled_enqueue_time)
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.state = 2), (SELECT min(expires_at)
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.expires_at IS NOT NULL AND (m.lock_token IS NULL OR m.locked_until <= %(now)s)), (SELECT min(locked_until)
        FROM sodalite_messages m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.locked_until > %(now)s AND m.lock_token IS NOT NULL), (SELECT min(locked_until)
        FROM sodalite_session_locks m
        WHERE m.entity = %(e)s AND m.partition = %(p)s AND m.locked_until > %(now)s));

-- name: select_next_due_many
SELECT (SELECT LEAST((SELECT min(scheduled_enqueue_time)
        FROM sodalite_messages m
        WHERE m.entity = r.e AND m.partition = r.p AND m.state = 2), (SELECT min(expires_at)
        FROM sodalite_messages m
        WHERE m.entity = r.e AND m.partition = r.p AND m.expires_at IS NOT NULL AND (m.lock_token IS NULL OR m.locked_until <= %(now)s)), (SELECT min(locked_until)
        FROM sodalite_messages m
        WHERE m.entity = r.e AND m.partition = r.p AND m.locked_until > %(now)s AND m.lock_token IS NOT NULL), (SELECT min(locked_until)
        FROM sodalite_session_locks m
        WHERE m.entity = r.e AND m.partition = r.p AND m.locked_until > %(now)s)))
        FROM unnest(%(es)s::bytea[], %(ps)s::bigint[]) WITH ORDINALITY AS r(e, p, i)
        ORDER BY r.i;

-- name: select_entities
SELECT path, kind, properties, path_key
        FROM sodalite_entities
        ORDER BY path_key;

-- name: select_ring
SELECT generation, pg_relation_size('sodalite_messages_g0'), pg_relation_size('sodalite_messages_g1'),
            pg_relation_size('sodalite_messages_g2'), pg_relation_size('sodalite_messages_g3'),
            pg_relation_size('sodalite_counters_g0'), pg_relation_size('sodalite_counters_g1'),
            pg_relation_size('sodalite_counters_g2'), pg_relation_size('sodalite_counters_g3'),
            history_generation, pg_relation_size('sodalite_duplicate_history_g0'),
            pg_relation_size('sodalite_duplicate_history_g1'),
            pg_relation_size('sodalite_duplicate_history_g2'),
            pg_relation_size('sodalite_duplicate_history_g3')
        FROM sodalite_ring;
