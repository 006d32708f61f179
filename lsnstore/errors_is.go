package lsnstore

import "errors"

// IsBadPosition reports whether err is a position that could not be parsed
// (ErrBadPosition); errors.Is works as well.
func IsBadPosition(err error) bool { return errors.Is(err, ErrBadPosition) }

// IsNoDatabase reports whether err is a Redis store made without
// RedisOptions.Database (ErrNoDatabase); errors.Is works as well.
func IsNoDatabase(err error) bool { return errors.Is(err, ErrNoDatabase) }

// IsStoreFormat reports whether err is, or wraps, ErrStoreFormat; errors.Is works as
// well.
func IsStoreFormat(err error) bool { return errors.Is(err, ErrStoreFormat) }
