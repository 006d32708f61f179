package plugin

import (
	"context"
	"slices"
	"strings"

	"github.com/freshread/freshread/lsnstore"
)

// Key signatures (lsnstore.KeySignatures, docs/keyed-positions.md): the
// processes sharing a store agree, per table, on the columns they key it
// by. A table's signature here is "v1:<pk>;<col>,<col>...": the integer
// primary key the plugin knows ("" for a model without one) and the
// table's KeyColumns, sorted. The first process that keys the table
// records its signature; a process whose signature is another writes the
// table plainly (the store raises its unkeyed position, which every keyed
// read waits for) and reads by key only the columns the recorded
// signature keys by.

const signatureVersion = "v1:"

// keySignature is the signature of table for a process that knows its
// integer primary key pk ("": the model has none).
func (p *Plugin) keySignature(table, pk string) string {
	cols := make([]string, 0, len(p.cfg.KeyColumns[table]))
	for _, c := range p.cfg.KeyColumns[table] {
		if !strings.EqualFold(c, pk) {
			cols = append(cols, c)
		}
	}
	slices.Sort(cols)
	cols = slices.Compact(cols)
	return signatureVersion + pk + ";" + strings.Join(cols, ",")
}

// signatureColumns returns the columns a signature keys by.
func signatureColumns(sig string) (pk string, cols []string, ok bool) {
	rest, ok := strings.CutPrefix(sig, signatureVersion)
	if !ok {
		return "", nil, false
	}
	pk, list, ok := strings.Cut(rest, ";")
	if !ok {
		return "", nil, false
	}
	if list != "" {
		cols = strings.Split(list, ",")
	}
	return pk, cols, true
}

// signatureClaim is what the store answered a claim of sig: the
// signature in force.
type signatureClaim struct {
	sig, inForce string
}

// keysAgreed reports whether this process may key table with signature
// sig: the store keeps no signatures, or sig is the one in force. The
// store's answer is cached per table (one round trip per table and
// signature; the cache is emptied when the store's data changes,
// forgetSignatures). A store error means no.
func (p *Plugin) keysAgreed(ctx context.Context, tn *tableKeyNames, table, sig string) bool {
	inForce, ok := p.signatureInForce(ctx, tn, table, sig)
	return ok && inForce == sig
}

// keyedColumnAgreed reports whether a read of table pinned to col may be
// keyed: every writer keying table by key raises col's positions, that
// is, col is a column of the signature in force.
func (p *Plugin) keyedColumnAgreed(ctx context.Context, tn *tableKeyNames, table, sig, col string) bool {
	inForce, ok := p.signatureInForce(ctx, tn, table, sig)
	if !ok {
		return false
	}
	if inForce == sig {
		return true
	}
	pk, cols, ok := signatureColumns(inForce)
	if !ok {
		return false
	}
	if pk != "" && p.sameColumn(pk, col) {
		return true
	}
	for _, c := range cols {
		if p.sameColumn(c, col) {
			return true
		}
	}
	return false
}

func (p *Plugin) sameColumn(a, b string) bool { return strings.EqualFold(a, b) }

// signatureInForce returns table's signature in force, claiming sig when
// the table has none; ok is false when the store could not say.
func (p *Plugin) signatureInForce(ctx context.Context, tn *tableKeyNames, table, sig string) (string, bool) {
	ks, ok := p.cfg.Store.(lsnstore.KeySignatures)
	if !ok {
		return sig, true
	}
	if c := tn.claim.Load(); c != nil && c.sig == sig {
		return c.inForce, true
	}
	inForce, err := ks.ClaimSignature(ctx, table, sig)
	if err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot read a table's key signature; its reads and writes use the table position", "table", table, "err", err)
		return "", false
	}
	if inForce != sig {
		p.cfg.Logger.WarnContext(ctx, "freshread: another process sharing the position store keys this table by other columns (Config.KeyColumns or the primary key differ); this process writes it by table and reads it by key only by the columns both know",
			"table", table, "this_process", sig, "in_force", inForce)
	}
	tn.claim.Store(&signatureClaim{sig: sig, inForce: inForce})
	return inForce, true
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
