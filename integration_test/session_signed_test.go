package integration_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// checkSignedSessions: behind the middleware, with replay paused after a
// write, under Session consistency (the session's position is the only
// rule) and MaxFallbackRate with a burst of 4:
//   - with a key, the token of the write (signed) reads the write fresh
//     (new, from the primary); forged tokens (unsigned maximal, the
//     genuine token with its position raised and its MAC kept, one signed
//     with another key) are ignored: their reads are served by a replica
//     and none is refused; the genuine token still reads fresh after them;
//   - without a key, a maximal token and the genuine one raised past the
//     primary are ignored too (their reads served by a replica);
//   - a client replaying a genuine position the replicas lack spends the
//     sessions' half of the budget only: its reads are then refused, while
//     another user's read that falls back for its table still reads the
//     write fresh from the primary.
func checkSignedSessions(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t, withConfig(func(c *plugin.Config) {
		c.Consistency = plugin.Session
		c.MaxFallbackRate = 0.01
		c.FallbackBurst = 4
	}))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.waitReplicaServes(e.db)
	e.pauseAll()

	mux := http.NewServeMux()
	mux.HandleFunc("POST /items/1", func(w http.ResponseWriter, r *http.Request) {
		if err := setName(e.db.WithContext(r.Context()), 1); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	read := func(w http.ResponseWriter, r *http.Request, what func(ctx context.Context) (served, error)) {
		ctx := r.Context()
		if r.URL.Query().Get("level") == "table" {
			ctx = plugin.WithConsistency(ctx, plugin.Table)
		}
		got, err := what(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, got.Name+" "+strconv.Itoa(got.Port))
	}
	mux.HandleFunc("GET /items/1", func(w http.ResponseWriter, r *http.Request) {
		read(w, r, func(ctx context.Context) (served, error) {
			var s served
			err := e.db.WithContext(ctx).Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").Where("id = ?", 1).Scan(&s).Error
			return s, err
		})
	})
	mux.HandleFunc("GET /other", func(w http.ResponseWriter, r *http.Request) {
		read(w, r, func(ctx context.Context) (served, error) {
			var s served
			err := e.db.WithContext(ctx).Model(&Other{}).Select("note AS name, 0 AS version, " + e.c.portExpr() + " AS port").Where("id = 1").Scan(&s).Error
			return s, err
		})
	})
	key := []byte("integration-test-key-0123456789ab")
	signed := httptest.NewServer(plugin.Middleware(plugin.MiddlewareConfig{Keys: [][]byte{key}})(mux))
	defer signed.Close()
	unsigned := httptest.NewServer(plugin.Middleware(plugin.MiddlewareConfig{})(mux))
	defer unsigned.Close()

	// do sends a request with tok in the session header and returns the
	// status, the body's fields (name and port, or the error) and the
	// token the response carries.
	do := func(srv *httptest.Server, method, path, tok string) (int, []string, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("X-Freshread-Session", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.Fields(string(body)), resp.Header.Get("X-Freshread-Session")
	}
	mustRead := func(srv *httptest.Server, path, tok, want string, onPrimary bool, what string) {
		t.Helper()
		code, f, _ := do(srv, "GET", path, tok)
		if code != 200 || len(f) != 2 {
			t.Fatalf("%s: %d %q", what, code, f)
		}
		if want != "" && f[0] != want {
			t.Fatalf("STALE READ, %s: %q, want %s", what, f, want)
		}
		if port := atoi(f[1]); onPrimary && port != e.c.primaryPort() {
			t.Fatalf("%s: %q, want the primary (%d)", what, f, e.c.primaryPort())
		} else if !onPrimary && !e.isReplica(port) {
			t.Fatalf("%s: %q, want a replica (the primary is %d)", what, f, e.c.primaryPort())
		}
	}

	code, _, tok := do(signed, "POST", "/items/1", "")
	if code != 200 || !strings.Contains(tok, ".m=") {
		t.Fatalf("POST: %d, token %q", code, tok)
	}
	t.Logf("signed token %s", tok)
	m := regexp.MustCompile(`\.(\d+)=([^.]+)\.m=`).FindStringSubmatch(tok)
	if m == nil {
		t.Fatalf("no position in the token %q", tok)
	}
	cluster, body := m[1], tok[:strings.LastIndex(tok, ".m=")]
	mac := tok[len(body):]
	raised := strings.Replace(body, cluster+"="+m[2], cluster+"=FFFFFFFF/FFFFFFFF", 1)
	maximal := "v1." + cluster + "=FFFFFFFF/FFFFFFFF"
	genuine, err := lsnstore.ParsePosition(m[2])
	if err != nil {
		t.Fatal(err)
	}
	gibPast := lsnstore.PositionOf(genuine.Main() + 1<<30)
	forgedSigned := signToken(maximal, []byte("some-other-key-0123456789abcdef!"))
	if signToken(body, key) != tok {
		t.Fatalf("the token is not signed as documented: %q", tok)
	}

	mustRead(signed, "/items/1", tok, "new", true, "the genuine signed token")
	mustRead(signed, "/items/1", "", "old", false, "no token") // the replica is stale: the token matters
	for i := range 20 {
		for name, forged := range map[string]string{
			"unsigned maximal":         maximal,
			"genuine raised, MAC kept": raised + mac,
			"signed with another key":  forgedSigned,
		} {
			mustRead(signed, "/items/1", forged, "", false, "forged token ("+name+") "+strconv.Itoa(i))
			mustRead(signed, "/other", forged, "untouched", false, "forged token ("+name+") "+strconv.Itoa(i)+", untouched table")
		}
	}
	mustRead(signed, "/items/1", tok, "new", true, "the genuine signed token after 120 forged reads")

	for i := range 20 {
		for name, forged := range map[string]string{
			"maximal":        maximal,
			"genuine raised": raised,
			"1 GiB past":     "v1." + cluster + "=" + gibPast.String(),
		} {
			if genuine.HasLanes() && name == "1 GiB past" {
				continue // GTID lanes: the main lane means nothing
			}
			mustRead(unsigned, "/items/1", forged, "", false, "unkeyed, forged token ("+name+") "+strconv.Itoa(i))
		}
	}
	// The first series, by label, is bad-signature: one per forged
	// request to the keyed middleware.
	if n := pluginMetric(t, e.plug, "freshread_session_tokens_ignored_total"); n != 120 {
		t.Fatalf("freshread_session_tokens_ignored_total{reason=bad-signature} = %v, want 120", n)
	}

	// The sessions' half of the burst (2) went to the genuine token's two
	// reads: a client replaying that position (no key: it could be any
	// position the replicas lack) is refused now...
	for i := range 5 {
		code, f, _ := do(unsigned, "GET", "/items/1", body)
		if code != http.StatusServiceUnavailable || !strings.Contains(strings.Join(f, " "), "Config.MaxFallbackRate") {
			t.Fatalf("replayed token, read %d: %d %q, want refused", i, code, f)
		}
	}
	// ...while another user's fallbacks (its table was written) still have
	// the other half, and read the write fresh.
	for i := range 2 {
		mustRead(unsigned, "/items/1?level=table", "", "new", true, "another user's fallback "+strconv.Itoa(i))
	}
	e.resumeAll()
}

// signToken signs tok with key as the guide documents: HMAC-SHA256 of the
// token, base64url without padding, after ".m=".
func signToken(tok string, key []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(tok))
	return tok + ".m=" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func TestSignedSessions(t *testing.T)        { checkSignedSessions(t, newEnv) }
func TestMariaDBSignedSessions(t *testing.T) { checkSignedSessions(t, newMariaEnv) }
