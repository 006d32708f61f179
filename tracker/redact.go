package tracker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
)

// secrets holds strings that must never be logged: the passwords of the
// DSNs the tracker built.
type secrets struct {
	mu   sync.RWMutex
	list []string
}

func (s *secrets) add(v string) {
	if len(v) < 3 { // too short to redact without mangling the text
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.list {
		if x == v {
			return
		}
	}
	s.list = append(s.list, v)
}

func (s *secrets) redact(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.list {
		text = strings.ReplaceAll(text, v, "xxxxx")
	}
	return text
}

// redactedError keeps the chain of err (errors.Is) but prints redacted.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func redactErr(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), secret, "xxxxx"), err: err}
}

func (s *secrets) err(err error) error {
	if err == nil {
		return nil
	}
	msg := s.redact(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactHandler redacts secrets from every record's message and string or
// error attributes.
type redactHandler struct {
	inner slog.Handler
	s     *secrets
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.s.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.s.redact(v.String()))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, x := range attrs {
			out[i] = h.attr(x)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if e, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.s.redact(e.Error()))
		}
		return slog.String(a.Key, h.s.redact(v.String()))
	}
	return a
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return redactHandler{inner: h.inner.WithAttrs(red), s: h.s}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{inner: h.inner.WithGroup(name), s: h.s}
}

var _ = errors.New
