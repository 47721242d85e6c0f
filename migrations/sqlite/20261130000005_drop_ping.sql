-- The walking skeleton's ping table is gone: the system page reports the database's state itself.
DROP TABLE IF EXISTS ping;
