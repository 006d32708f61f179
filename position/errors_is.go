package position

import "errors"

// IsBadPosition reports whether err is, or wraps, ErrBadPosition; errors.Is works as
// well.
func IsBadPosition(err error) bool { return errors.Is(err, ErrBadPosition) }
