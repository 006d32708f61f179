package merge

import "errors"

// IsUnsupported reports whether err is, or wraps, ErrUnsupported; errors.Is works as
// well.
func IsUnsupported(err error) bool { return errors.Is(err, ErrUnsupported) }
