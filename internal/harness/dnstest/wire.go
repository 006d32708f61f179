package dnstest

import (
	"encoding/binary"
	"strings"
)

// The DNS wire format (RFC 1035 section 4.1), as much as the server needs.
const (
	typeA   = 1
	typeSRV = 33
	classIN = 1

	flagResponse      = 1 << 15
	flagAuthoritative = 1 << 10
	flagRecursion     = 1 << 8 // recursion desired
	opcodeMask        = 0xf << 11

	rcodeNameError     = 3
	rcodeServerFailure = 2
)

// question is a message's question.
type question struct {
	name          string // as asked, with its final dot
	qtype, qclass uint16
}

// query is what a reply needs of a query: its id, flags and first
// question (nil when it has none).
type query struct {
	id, flags uint16
	question  *question
}

// parseQuery reads a query's header and first question.
func parseQuery(msg []byte) (query, error) {
	if len(msg) < 12 {
		return query{}, errFormat
	}
	q := query{id: binary.BigEndian.Uint16(msg), flags: binary.BigEndian.Uint16(msg[2:])}
	if q.flags&flagResponse != 0 {
		return query{}, errFormat
	}
	if binary.BigEndian.Uint16(msg[4:]) == 0 {
		return q, nil
	}
	name, off, err := readName(msg, 12)
	if err != nil || off+4 > len(msg) {
		return query{}, errFormat
	}
	q.question = &question{name: name, qtype: binary.BigEndian.Uint16(msg[off:]), qclass: binary.BigEndian.Uint16(msg[off+2:])}
	return q, nil
}

// readName reads the name at off, following compression pointers, and
// returns it with its final dot and the offset after it.
func readName(msg []byte, off int) (string, int, error) {
	var labels []string
	end := -1 // the offset after the name where it began, once a pointer is followed
	for jumps := 0; ; {
		if off >= len(msg) {
			return "", 0, errFormat
		}
		n := int(msg[off])
		switch {
		case n == 0:
			if end < 0 {
				end = off + 1
			}
			return strings.Join(labels, ".") + ".", end, nil
		case n&0xc0 == 0xc0:
			if off+1 >= len(msg) || jumps > 10 {
				return "", 0, errFormat
			}
			if end < 0 {
				end = off + 2
			}
			off = int(binary.BigEndian.Uint16(msg[off:]) & 0x3fff)
			jumps++
		case n&0xc0 != 0:
			return "", 0, errFormat
		default:
			if off+1+n > len(msg) {
				return "", 0, errFormat
			}
			labels = append(labels, string(msg[off+1:off+1+n]))
			off += 1 + n
		}
	}
}

// appendName appends name (with or without its final dot) uncompressed.
func appendName(b []byte, name string) []byte {
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" {
			continue
		}
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}

// rr is an answer record of the question's name, class IN, TTL 0.
type rr struct {
	rtype uint16
	data  []byte
}

// srvData is an SRV record's data.
func srvData(priority, weight, port uint16, target string) []byte {
	b := binary.BigEndian.AppendUint16(nil, priority)
	b = binary.BigEndian.AppendUint16(b, weight)
	b = binary.BigEndian.AppendUint16(b, port)
	return appendName(b, target)
}

// reply is the reply to a query.
type reply struct {
	query
	rcode   uint16
	answers []rr
}

// pack encodes the reply: the query's id, opcode and RD flag,
// authoritative, its question echoed, then the answers.
func (r reply) pack() []byte {
	flags := uint16(flagResponse|flagAuthoritative) | r.flags&(opcodeMask|flagRecursion) | r.rcode
	var qd uint16
	if r.question != nil {
		qd = 1
	}
	b := binary.BigEndian.AppendUint16(nil, r.id)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, qd)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.answers)))
	b = binary.BigEndian.AppendUint16(b, 0) // authority
	b = binary.BigEndian.AppendUint16(b, 0) // additional
	if r.question == nil {
		return b
	}
	q := r.question
	b = appendName(b, q.name)
	b = binary.BigEndian.AppendUint16(b, q.qtype)
	b = binary.BigEndian.AppendUint16(b, q.qclass)
	for _, a := range r.answers {
		b = appendName(b, q.name)
		b = binary.BigEndian.AppendUint16(b, a.rtype)
		b = binary.BigEndian.AppendUint16(b, classIN)
		b = binary.BigEndian.AppendUint32(b, 0) // TTL
		b = binary.BigEndian.AppendUint16(b, uint16(len(a.data)))
		b = append(b, a.data...)
	}
	return b
}
