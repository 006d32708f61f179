SELECT * FROM users JOIN orders ON orders.user_id = users.id
UPDATE users SET name = 'x' WHERE id = 1
SET statement_timeout TO 1000
WITH d AS (DELETE FROM queue RETURNING *) INSERT INTO archive SELECT * FROM d
SELECT * FROM jobs FOR UPDATE
