// Package example is a small order service on GORM, used by `make demo`:
// it writes orders and reads them back, reporting which server answered
// each read.
package example
