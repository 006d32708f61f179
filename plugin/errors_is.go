package plugin

import "errors"

// An Is helper for every sentinel of the package, each errors.Is(err,
// sentinel); errors.Is itself works as well.

// IsNotReplica reports whether err is a replica refused for not being in
// recovery (ErrNotReplica).
func IsNotReplica(err error) bool { return errors.Is(err, ErrNotReplica) }

// IsDBResolver reports whether err is the refusal to install next to
// gorm.io/plugin/dbresolver (ErrDBResolver).
func IsDBResolver(err error) bool { return errors.Is(err, ErrDBResolver) }

// IsNotInstalled reports whether err is a call on a Plugin no *gorm.DB has
// initialized (ErrNotInstalled).
func IsNotInstalled(err error) bool { return errors.Is(err, ErrNotInstalled) }

// IsClosed reports whether err is, or wraps, ErrClosed.
func IsClosed(err error) bool { return errors.Is(err, ErrClosed) }

// IsSeveralServers reports whether err is a replica DSN refused for
// reaching several servers (ErrSeveralServers).
func IsSeveralServers(err error) bool { return errors.Is(err, ErrSeveralServers) }

// IsPooler reports whether err is a refusal behind a connection pooler in
// transaction mode (ErrPooler).
func IsPooler(err error) bool { return errors.Is(err, ErrPooler) }

// IsSessionAborted reports whether err is a replay session that could not
// move to the primary (ErrSessionAborted).
func IsSessionAborted(err error) bool { return errors.Is(err, ErrSessionAborted) }

// IsBadToken reports whether err is a session token that could not be
// parsed (ErrBadToken).
func IsBadToken(err error) bool { return errors.Is(err, ErrBadToken) }
