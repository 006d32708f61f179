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
	e := staleSessionEnv(t, newEnv)

	app := newSessionApp(t, e)
	key := []byte("integration-test-key-0123456789ab")
	signed := app.serve(plugin.MiddlewareConfig{Keys: [][]byte{key}})
	unsigned := app.serve(plugin.MiddlewareConfig{})
	do, mustRead := app.do, app.mustRead

	tok, cluster, pos := app.write(signed)
	body := tok[:strings.LastIndex(tok, ".m=")]
	mac := tok[len(body):]
	raised := strings.Replace(body, cluster+"="+pos, cluster+"=FFFFFFFF/FFFFFFFF", 1)
	maximal := "v1." + cluster + "=FFFFFFFF/FFFFFFFF"
	genuine, err := lsnstore.ParsePosition(pos)
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

// staleSessionEnv is the env of the session tests: Session consistency,
// MaxFallbackRate with a burst of 4 (the sessions' share is 2 reads), and
// item 1 "old" on every replica, replay paused (resumed when the test
// ends).
func staleSessionEnv(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) *env {
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
	return e
}

// sessionApp is the HTTP application of the session tests, on e.db:
// POST /items/1 sets item 1 "new"; GET /items/1 and GET /other answer the
// row's name and the port of the server that read it (?level=table reads
// under Table consistency), 503 with the error when the read fails.
type sessionApp struct {
	t   *testing.T
	e   *env
	mux *http.ServeMux
}

func newSessionApp(t *testing.T, e *env) *sessionApp {
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
	return &sessionApp{t: t, e: e, mux: mux}
}

// serve serves the application behind a middleware of cfg until the test
// ends.
func (a *sessionApp) serve(cfg plugin.MiddlewareConfig) *httptest.Server {
	srv := httptest.NewServer(plugin.Middleware(cfg)(a.mux))
	a.t.Cleanup(srv.Close)
	return srv
}

// do sends a request with tok in the session header and returns the
// status, the body's fields (name and port, or the error) and the token
// the response carries.
func (a *sessionApp) do(srv *httptest.Server, method, path, tok string) (int, []string, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("X-Freshread-Session", tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.Fields(string(body)), resp.Header.Get("X-Freshread-Session")
}

// mustRead reads path with tok and fails the test unless the read
// succeeded, returned want (any name when ""), and was served by the
// primary (onPrimary) or by a replica.
func (a *sessionApp) mustRead(srv *httptest.Server, path, tok, want string, onPrimary bool, what string) {
	a.t.Helper()
	e := a.e
	code, f, _ := a.do(srv, "GET", path, tok)
	if code != 200 || len(f) != 2 {
		a.t.Fatalf("%s: %d %q", what, code, f)
	}
	if want != "" && f[0] != want {
		a.t.Fatalf("STALE READ, %s: %q, want %s", what, f, want)
	}
	if port := atoi(f[1]); onPrimary && port != e.c.primaryPort() {
		a.t.Fatalf("%s: %q, want the primary (%d)", what, f, e.c.primaryPort())
	} else if !onPrimary && !e.isReplica(port) {
		a.t.Fatalf("%s: %q, want a replica (the primary is %d)", what, f, e.c.primaryPort())
	}
}

// write posts the write through srv (a middleware with keys) and returns
// the signed token of the response, the database's identifier in it and
// the position it claims there.
func (a *sessionApp) write(srv *httptest.Server) (tok, cluster, pos string) {
	a.t.Helper()
	code, _, tok := a.do(srv, "POST", "/items/1", "")
	if code != 200 || !strings.Contains(tok, ".m=") {
		a.t.Fatalf("POST: %d, token %q", code, tok)
	}
	a.t.Logf("signed token %s", tok)
	m := regexp.MustCompile(`\.(\d+)=([^.]+)\.m=`).FindStringSubmatch(tok)
	if m == nil {
		a.t.Fatalf("no position in the token %q", tok)
	}
	return tok, m[1], m[2]
}

// checkSessionKeys: MiddlewareConfig.Keys on real servers, under Session
// consistency and MaxFallbackRate with a burst of 4 (the sessions' share
// is 2 reads), with replay paused after a write made behind a middleware
// signing with the old key:
//   - rotating (Keys {new, old}), the old key's token verifies: the read
//     after the write goes to the primary and returns the write; the token
//     sent back is signed with the new key;
//   - once the old key is no longer listed (Keys {new}), the old key's
//     token is ignored: its reads are served by a replica (which lacks the
//     write), none is refused, and each is counted (bad-signature);
//   - a token minted for another database, signed with the current key
//     and claiming the write's position there, is ignored here: its reads
//     are served by a replica, each counted (other-database);
//   - the token sent back during the rotation still reads the write fresh
//     from the primary after all of them: the ignored tokens spent none of
//     the sessions' share of the fallback budget.
func checkSessionKeys(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := staleSessionEnv(t, newEnv)

	app := newSessionApp(t, e)
	oldKey := []byte("integration-old-key-0123456789abc")
	newKey := []byte("integration-new-key-0123456789abc")
	before := app.serve(plugin.MiddlewareConfig{Keys: [][]byte{oldKey}})
	rotating := app.serve(plugin.MiddlewareConfig{Keys: [][]byte{newKey, oldKey}})
	after := app.serve(plugin.MiddlewareConfig{Keys: [][]byte{newKey}})

	tok, cluster, pos := app.write(before)
	body := tok[:strings.LastIndex(tok, ".m=")]
	if signToken(body, oldKey) != tok {
		t.Fatalf("the write's token is not signed with the old key: %q", tok)
	}
	app.mustRead(rotating, "/items/1", "", "old", false, "no token") // the replica is stale: the token matters

	code, f, back := app.do(rotating, "GET", "/items/1", tok)
	if code != 200 || len(f) != 2 || f[0] != "new" || atoi(f[1]) != e.c.primaryPort() {
		t.Fatalf("STALE READ or not on the primary, the old key's token during the rotation: %d %q, want new from the primary (%d)", code, f, e.c.primaryPort())
	}
	if back == "" || signToken(back[:strings.LastIndex(back, ".m=")], newKey) != back || !strings.Contains(back, "."+cluster+"="+pos) {
		t.Fatalf("token sent back during the rotation %q: want the write's position signed with the new key", back)
	}

	const ignoredReads = 10
	otherID, err := strconv.ParseUint(cluster, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	otherDB := signToken("v1."+strconv.FormatUint(otherID^1, 10)+"="+pos, newKey)
	for i := range ignoredReads {
		app.mustRead(after, "/items/1", tok, "", false, "the old key's token, no longer listed, "+strconv.Itoa(i))
		app.mustRead(after, "/items/1", otherDB, "", false, "another database's token "+strconv.Itoa(i))
	}
	m := pluginMetrics(t, e.plug)
	for reason, want := range map[string]float64{"bad-signature": ignoredReads, "other-database": ignoredReads} {
		if n := m["freshread_session_tokens_ignored_total,reason="+reason]; n != want {
			t.Fatalf("freshread_session_tokens_ignored_total{reason=%s} = %v, want %v", reason, n, want)
		}
	}
	app.mustRead(after, "/items/1", back, "new", true, "the token sent back during the rotation, once it is done")
	e.resumeAll()
}

func TestSessionKeys(t *testing.T)        { checkSessionKeys(t, newEnv) }
func TestMariaDBSessionKeys(t *testing.T) { checkSessionKeys(t, newMariaEnv) }
