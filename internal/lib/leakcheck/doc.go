// Package leakcheck is a test's check that it left no goroutine running:
// it takes the goroutines running before (Current) and, at the end,
// reports those that appeared since and still run (VerifyNone), retrying
// with a backoff while they finish. The testing package's and the
// runtime's own goroutines (a test waiting on its subtests, the signal
// handler, the tracer) are never reported.
package leakcheck
