package integration_test

import "github.com/freshread/freshread/internal/testcluster"

var errUnsupported = testcluster.ErrUnsupported
