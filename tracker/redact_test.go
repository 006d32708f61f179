package tracker

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestRedaction(t *testing.T) {
	s := &secrets{}
	s.add(passwordOf("postgres://u:Very-Secret-1@h:5432/d"))
	s.add(passwordOf("host=h user=u password=Other-Secret-2 dbname=d"))
	var buf bytes.Buffer
	log := slog.New(redactHandler{inner: slog.NewJSONHandler(&buf, nil), s: s})
	base := errors.New("dial postgres://u:Very-Secret-1@h failed")
	log.With("dsn", "password=Other-Secret-2").Warn("failed Very-Secret-1", "err", base, "group", slog.GroupValue(slog.String("x", "Other-Secret-2")))
	if out := buf.String(); strings.Contains(out, "Secret-1") || strings.Contains(out, "Secret-2") || !strings.Contains(out, "xxxxx") {
		t.Fatalf("log not redacted: %s", out)
	}
	err := s.err(base)
	if strings.Contains(err.Error(), "Secret") || !errors.Is(err, base) {
		t.Fatalf("error not redacted or chain lost: %v", err)
	}
	f, err := DSNTemplate("postgres://u:Very-Secret-1@{host}:{port}/{database}?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f(Target{Host: "::1", Port: 5433, Database: "my db"})
	if !strings.Contains(d, "[::1]:5433/my%20db") {
		t.Fatalf("DSN %q", d)
	}
	if _, err := DSNTemplate("postgres://u:Very-Secret-1@{host}:notaport/x"); err == nil || strings.Contains(err.Error(), "Very-Secret-1") {
		t.Fatalf("bad template: %v", err)
	}
}
