// Package dnstest is an in-process DNS server for tests: it answers A and
// SRV questions from records the test changes while it runs, or fails
// every question (SERVFAIL) when told to. It speaks the DNS wire format
// (RFC 1035; SRV, RFC 2782) over UDP and TCP itself (wire.go), enough for
// Go's net.Resolver: one question per query, uncompressed answers.
package dnstest
