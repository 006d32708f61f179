package plugin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"time"
)

// macSep starts a signed token's MAC: "<token>.m=<base64url HMAC-SHA256 of
// <token>>". "m" is not a cluster id, so ParseToken rejects a signed token
// whose MAC was not removed.
const macSep = ".m="

// tokenMAC is the HMAC-SHA256 of tok under key.
func tokenMAC(key []byte, tok string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(tok))
	return h.Sum(nil)
}

// signToken appends tok's MAC under key.
func signToken(tok string, key []byte) string {
	return tok + macSep + base64.RawURLEncoding.EncodeToString(tokenMAC(key, tok))
}

// verifyToken returns the token signed tok carries when one of keys
// verifies its MAC.
func verifyToken(signed string, keys [][]byte) (string, bool) {
	i := strings.LastIndex(signed, macSep)
	if i < 0 {
		return "", false
	}
	tok := signed[:i]
	mac, err := base64.RawURLEncoding.DecodeString(signed[i+len(macSep):])
	if err != nil || len(mac) != sha256.Size {
		return "", false
	}
	for _, k := range keys {
		if hmac.Equal(mac, tokenMAC(k, tok)) {
			return tok, true
		}
	}
	return "", false
}

// requestSession is the session of a request's token, and the token as
// received when it was accepted (else empty: the middleware then sends
// the session's next token even when unchanged). With keys, a token must
// carry a MAC one of them verifies; without, a MAC (keys were removed) is
// dropped. An ignored token gives an empty session that says why
// (SessionState.ignored).
func requestSession(tok string, keys [][]byte) (*SessionState, string) {
	if tok == "" {
		return &SessionState{received: time.Now()}, ""
	}
	body := tok
	if len(keys) > 0 {
		var ok bool
		if body, ok = verifyToken(tok, keys); !ok {
			return &SessionState{received: time.Now(), ignored: ignoredBadSignature}, ""
		}
	} else if i := strings.LastIndex(tok, macSep); i >= 0 {
		body = tok[:i]
	}
	s, err := ParseToken(body)
	if err != nil {
		return &SessionState{received: time.Now(), ignored: ignoredMalformed}, ""
	}
	return s, tok
}
