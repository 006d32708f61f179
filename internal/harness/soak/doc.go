// Package soak is freshread's fault-injection soak: several plugin
// instances run a mixed workload against a real primary and its replicas
// while faults are injected on a schedule (the position store restarted
// empty or flushed, replay paused, replication delayed, replicas stopped,
// the primary restarted), and an independent checker (checker.go, which
// knows nothing of positions or routing) flags every read that saw a
// version older than one whose write had returned before the read began
// (Table), or older than its session's own last write (Session).
//
// RunRolling runs the last release's soak processes (built from git
// history, BuildRelease) beside this tree's on one store, replacing them
// one by one both ways: a rolling upgrade and its rollback.
//
// `make soak` runs it for a few minutes per engine
// (FRESHREAD_SOAK_DURATION); `make test` runs a short one. Results and
// the command are in docs/measurements/soak.md and
// docs/design/reliability.md.
package soak
