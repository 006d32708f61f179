package plugin_test

import (
	"encoding/base64"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/freshread/freshread/plugin"
)

// Signed session tokens: the first key signs, every key verifies, so a
// new key goes first and the old one stays second until the tokens it
// signed have expired. A token without a valid signature is ignored.
func ExampleMiddlewareConfig_keys() {
	os.Setenv("FRESHREAD_SESSION_KEY", base64.StdEncoding.EncodeToString([]byte("example-key-of-32-bytes-00000000")))
	defer os.Unsetenv("FRESHREAD_SESSION_KEY")
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("session empty:", plugin.SessionFrom(r.Context()).Empty())
	})

	// Keys come from your secret store: 32 random bytes each
	// (openssl rand -base64 32). The first signs; every key verifies.
	current, err := base64.StdEncoding.DecodeString(os.Getenv("FRESHREAD_SESSION_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	keys := [][]byte{current}
	if prev := os.Getenv("FRESHREAD_SESSION_KEY_PREVIOUS"); prev != "" {
		previous, err := base64.StdEncoding.DecodeString(prev)
		if err != nil {
			log.Fatal(err)
		}
		keys = append(keys, previous)
	}
	handler := plugin.Middleware(plugin.MiddlewareConfig{Keys: keys})(mux)

	// An unsigned token, as a client could forge it, is ignored.
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Freshread-Session", "v1.7312345678901234567=FFFFFFFF/FFFFFFFF")
	handler.ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// session empty: true
}
