// Package roundtrip estimates how long a peer takes to answer, as TCP
// estimates its retransmission timeout (RFC 6298), so that a caller can
// tell a peer that is slow (its answers arrive, late: the estimate grows
// with them) from one that is gone (nothing answers: no sample, the
// estimate stays what it was). The position store bounds its calls with
// it; the plugin bounds the wait for a replica's first answer with it.
package roundtrip
