package plugin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// Key signatures (lsnstore.KeySignatures, docs/design/keyed-positions.md): the
// processes sharing a store agree, per table, on the columns they key it
// by. A table's signature here is "v1:<pk>;<col>,<col>...": the integer
// primary key the plugin knows ("" for a model without one) and the
// table's KeyColumns, sorted, as every version signs it; or, for a
// primary key of another type, "v2:<col>:<type>;<col>,<col>...", so that
// processes that type a key column differently (and so name its values
// differently), and earlier versions, which key only integers, never
// share a signature: the store's signature in force decides between
// them. The first process that keys the table
// records its signature; a process whose signature is another writes the
// table plainly (the store raises its unkeyed position, which every keyed
// read waits for) and reads it by table position.

const (
	signatureVersion      = "v1:"
	typedSignatureVersion = "v2:"
)

// signatureOf is keySignature, cached in tn for the last pk asked (a
// table's primary key does not change: reads allocate nothing).
func (p *Plugin) signatureOf(tn *tableKeyNames, table string, pk *keyDef) string {
	pkSig := ""
	if pk != nil {
		pkSig = pk.sig
	}
	if c := tn.sig.Load(); c != nil && c.pk == pkSig {
		return c.sig
	}
	c := &tableSignature{pk: pkSig, sig: p.keySignature(table, pk)}
	tn.sig.Store(c)
	return c.sig
}

// tableSignature is a table's key signature for a primary key (its
// keyDef.sig).
type tableSignature struct{ pk, sig string }

// keySignature is the signature of table for a process that knows its
// primary key pk (nil: none).
func (p *Plugin) keySignature(table string, pk *keyDef) string {
	pkSig, pkCol := "", ""
	if pk != nil {
		pkSig = pk.sig
		pkCol, _ = pk.single()
	}
	cols := make([]string, 0, len(p.cfg.KeyColumns[table]))
	for _, c := range p.cfg.KeyColumns[table] {
		if !strings.EqualFold(c, pkCol) {
			cols = append(cols, c)
		}
	}
	slices.Sort(cols)
	cols = slices.Compact(cols)
	version := signatureVersion
	if pk != nil && !pk.integer() {
		version = typedSignatureVersion
	}
	return version + pkSig + ";" + strings.Join(cols, ",")
}

// signatureClaim is what the store answered a claim of sig: whether it is
// the table's signature in force, until when that holds (zero: until the
// store's data changes).
type signatureClaim struct {
	sig     string
	inForce bool
	until   time.Time
}

// keysAgreed reports whether this process may key table with signature
// sig (its reads pinned to a key column and its writes): the store keeps
// no signatures, or sig is the one in force. A process whose signature is
// another reads the table by table position and writes it plainly, which
// is safe whatever the others key by. The store's answer is cached per
// table for as long as the store says it holds (one round trip per table
// and that time; the cache is emptied when the store's data changes,
// forgetSignatures). A store error, or a store the circuit breaker has
// opened on, means no.
func (p *Plugin) keysAgreed(ctx context.Context, tn *tableKeyNames, table, sig string) bool {
	ks, ok := p.cfg.Store.(lsnstore.KeySignatures)
	if !ok {
		return true
	}
	if c := tn.claim.Load(); c != nil && c.sig == sig && (c.until.IsZero() || time.Now().Before(c.until)) {
		return c.inForce
	}
	// A store the circuit breaker has given up on (down, unreachable)
	// would hold the statement for a whole timeout before its own lookup
	// skips the store anyway: answer no at once, until a probe succeeds.
	if p.breaker.Open() {
		return false
	}
	now := time.Now()
	inForce, valid, err := ks.ClaimSignature(ctx, table, sig)
	if err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot read a table's key signature from the position store; its reads and writes use the table position (safe, fewer replica reads) until the store answers: err says why (Redis unreachable, or its user lacks a command: operations guide, Redis permissions)", "table", table, "err", err)
		return false
	}
	c := &signatureClaim{sig: sig, inForce: inForce == sig}
	if valid > 0 {
		c.until = now.Add(valid)
	}
	if prev := tn.claim.Swap(c); !c.inForce && (prev == nil || prev.inForce || prev.sig != sig) {
		p.cfg.Logger.WarnContext(ctx, "freshread: the position store holds another key signature for this table than this process's: a process sharing the store (this one included) keyed it by other columns within in_force_for, because Config.KeyColumns or the primary key differ, or because the table was dropped and created again with another key; this process reads and writes it by table position (safe, fewer replica reads) until the signatures agree or the store's lapses",
			"table", table, "this_process", sig, "in_force", inForce, "in_force_for", valid.Round(time.Second))
	}
	return c.inForce
}

// forgetSignatures empties the cache of signatures in force: the store's
// data changed (a loss: another process may have recorded its own since).
func (p *Plugin) forgetSignatures() {
	p.keyNames.Range(func(_, v any) bool {
		v.(*tableKeyNames).claim.Store(nil)
		return true
	})
}

// signedTable is the name a keyed write of table by signature sig raises
// first.
func (p *Plugin) signedTable(table, sig string) string {
	if _, ok := p.cfg.Store.(lsnstore.KeySignatures); ok {
		return lsnstore.SignedKeyedTable(table, sig)
	}
	return lsnstore.KeyedTable(table)
}
