package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/freshread/freshread/lsnstore"
)

// checkStoreFormat checks, at db.Use, that the position store holds no
// data of a format this process cannot run beside (a release too new or
// too old beside this one: lsnstore.FormatChecker), and records this
// process's format. A refusal fails db.Use with an error wrapping
// lsnstore.ErrStoreFormat that names both releases and what to do. A
// store that cannot be asked now is no refusal: its reader checks again
// at every verification until it answers, and no read trusts the store
// before then (they go to the primary).
func (p *Plugin) checkStoreFormat() error {
	fc, ok := p.cfg.Store.(lsnstore.FormatChecker)
	if !ok {
		return nil
	}
	err := fc.CheckFormat(context.Background())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lsnstore.ErrStoreFormat):
		return fmt.Errorf("plugin: %w", err)
	}
	p.cfg.Logger.Warn("freshread: could not check the position store's format at db.Use; reads stay on the primary until the store answers and its format is checked", "err", err)
	return nil
}
