package plugin

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// What the log said last of a replica's polls (replica.health): a replica
// unreachable at start, down and up again are each said once per
// transition, not per poll.
const (
	healthUnknown int32 = iota // no poll answered or failed yet
	healthUp
	healthDown
)

// noteReplicaHealth logs a replica's transition after a poll (err: it
// failed): unreachable at start and down at WARN, up again at INFO. The
// cause is redacted of the replica's DSN and password (replica.secrets).
func (p *Plugin) noteReplicaHealth(ctx context.Context, r *replica, err error) {
	if err == nil {
		p.noteReplicaUp(ctx, r)
		return
	}
	if ctx.Err() != nil && p.lifetime().Err() != nil {
		return // the plugin is closing: its own cancellation, not the replica's
	}
	switch r.health.Swap(healthDown) {
	case healthUnknown:
		p.cfg.Logger.WarnContext(ctx, "freshread: replica unreachable at start; it starts down and its reads go to the other replicas or the primary until a poll answers: check its DSN, credentials, network and max_connections (err says which failed)",
			"replica", r.name, "err", redact(err, r.secrets))
	case healthUp:
		p.cfg.Logger.WarnContext(ctx, "freshread: replica is down (its poll failed); its reads go to the other replicas or the primary until a poll answers: check the server, its network and max_connections (err says which failed)",
			"replica", r.name, "err", redact(err, r.secrets))
	}
}

// noteReplicaUp logs, at INFO, a replica up again after the log said it
// was down.
func (p *Plugin) noteReplicaUp(ctx context.Context, r *replica) {
	if r.health.Swap(healthUp) == healthDown {
		p.cfg.Logger.InfoContext(ctx, "freshread: replica is up again; reads may go to it once it is fresh", "replica", r.name)
	}
}

// noteFollowedHealth logs a replica's transition seen by a follower of
// the shared poll (followOnce), as noteReplicaHealth does for a poll:
// down at WARN, up again at INFO, once per transition. A follower does
// not query the replica, so it has no cause to give: the log of the
// process that polls for the fleet has it.
func (p *Plugin) noteFollowedHealth(ctx context.Context, r *replica, up bool) {
	if up {
		p.noteReplicaUp(ctx, r)
		return
	}
	if r.health.Swap(healthDown) != healthDown {
		p.cfg.Logger.WarnContext(ctx, "freshread: replica is down (the fleet's shared poll reports it down, or does not list it); its reads go to the other replicas or the primary until it is reported up: the log of the process that polls for the fleet (Config.PollerLease) has the cause; check the server, its network and max_connections",
			"replica", r.name)
	}
}

// notePrimaryPoll logs the transitions of the poll of the primary's
// positions (err: it failed): failing at WARN, answering again at INFO,
// once each per failing spell. The cause is redacted of the primary's DSN
// and password.
func (p *Plugin) notePrimaryPoll(ctx context.Context, err error) {
	if err == nil {
		if p.primaryFailing {
			p.primaryFailing = false
			p.cfg.Logger.InfoContext(ctx, "freshread: the primary answers its poll again")
		}
		return
	}
	if p.primaryFailing || (ctx.Err() != nil && p.lifetime().Err() != nil) {
		return // said already, or the plugin is closing
	}
	p.primaryFailing = true
	p.cfg.Logger.WarnContext(ctx, "freshread: cannot poll the primary's position; until it answers, replicas are judged against the last position read, and a change of the position store cannot be accepted (table reads go to the primary): check that the primary is up and reachable from this process, its max_connections and the credentials (err says which failed)",
		"err", redact(err, p.primarySecrets))
}

// markReplicaDown records that something other than a poll (a stalled
// read) found the replica down: the next poll that answers logs it up
// again. It reports whether this is a transition (the log has not said
// the replica is down already), which the caller then logs.
func markReplicaDown(r *replica) bool { return r.health.Swap(healthDown) != healthDown }

// dsnSecrets returns what the errors of a replica, or of the primary,
// must never show in the log: its DSN and the password in it (PostgreSQL
// dialectors opened from a DSN; the MySQL driver's errors carry neither).
func dsnSecrets(d gorm.Dialector) []string {
	pd, ok := d.(*postgres.Dialector)
	if !ok || pd.Config == nil || pd.Config.DSN == "" {
		return nil
	}
	secrets := []string{pd.Config.DSN}
	if c, err := pgconn.ParseConfig(pd.Config.DSN); err == nil && c.Password != "" {
		secrets = append(secrets, c.Password)
	}
	return secrets
}

// redact returns err's text with every secret replaced.
func redact(err error, secrets []string) string {
	s := err.Error()
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// laggingOrNone is the reason of a read no replica could serve fresh:
// ReasonLagging when a replica is usable but behind, ReasonNoReplica when
// none is usable at all (every one down, or unconfirmed within MaxLag).
func (p *Plugin) laggingOrNone() Reason {
	now := time.Now()
	for _, r := range p.replicas() {
		if r.state.Load().usable(now, p.cfg.MaxLag) {
			return ReasonLagging
		}
	}
	return ReasonNoReplica
}
