package integration_test

import "github.com/freshread/freshread/internal/harness/testcluster"

var errUnsupported = testcluster.ErrUnsupported
