package testcluster

import (
	"errors"
	"fmt"
)

// ErrUnavailable is returned (wrapped) when no provider can supply a server.
// The message says what to install.
var ErrUnavailable = errors.New("testcluster: server unavailable")

// ErrUnsupported is returned by a control the current provider cannot do,
// such as stopping a server that was given by an environment variable.
var ErrUnsupported = errors.New("testcluster: control not supported by this provider")

func unavailable(what, hint string) error {
	return fmt.Errorf("%w: %s: %s", ErrUnavailable, what, hint)
}
