package reshard

import "errors"

// IsConfig reports whether err is, or wraps, ErrConfig; errors.Is works as
// well.
func IsConfig(err error) bool { return errors.Is(err, ErrConfig) }

// IsSchema reports whether err is, or wraps, ErrSchema; errors.Is works as
// well.
func IsSchema(err error) bool { return errors.Is(err, ErrSchema) }

// IsNotOwner reports whether err is, or wraps, ErrNotOwner; errors.Is works as
// well.
func IsNotOwner(err error) bool { return errors.Is(err, ErrNotOwner) }

// IsForeignRow reports whether err is, or wraps, ErrForeignRow; errors.Is works as
// well.
func IsForeignRow(err error) bool { return errors.Is(err, ErrForeignRow) }

// IsBusy reports whether err is, or wraps, ErrBusy; errors.Is works as
// well.
func IsBusy(err error) bool { return errors.Is(err, ErrBusy) }

// IsPhase reports whether err is, or wraps, ErrPhase; errors.Is works as
// well.
func IsPhase(err error) bool { return errors.Is(err, ErrPhase) }

// IsSlotLost reports whether err is, or wraps, ErrSlotLost; errors.Is works as
// well.
func IsSlotLost(err error) bool { return errors.Is(err, ErrSlotLost) }

// IsDecode reports whether err is, or wraps, ErrDecode; errors.Is works as
// well.
func IsDecode(err error) bool { return errors.Is(err, ErrDecode) }

// IsVerify reports whether err is, or wraps, ErrVerify; errors.Is works as
// well.
func IsVerify(err error) bool { return errors.Is(err, ErrVerify) }

// IsSwitchTimeout reports whether err is, or wraps, ErrSwitchTimeout; errors.Is works as
// well.
func IsSwitchTimeout(err error) bool { return errors.Is(err, ErrSwitchTimeout) }
