-- Leases on running runs: the instance that drives a run holds it until `lease_until_ms` and
-- renews it while it works; a run whose lease ran out is taken over by another instance's
-- reaper. Every write of a running run is fenced on its owner, so an instance that lost the
-- lease writes nothing more.
ALTER TABLE agent_run ADD COLUMN lease_owner TEXT;
ALTER TABLE agent_run ADD COLUMN lease_until_ms BIGINT NOT NULL DEFAULT 0;
CREATE INDEX agent_run_lease ON agent_run (lease_until_ms) WHERE status = 'running';
