// Package doccheck holds only a test: every ```go block of the user guide
// (docs/guide/*.md) and of README.md must be the body, or a part of the
// body, of an Example function somewhere in the repository, or, when it
// starts with "package main", the text of a program of the repository
// from its package clause on, so that the guide's code is compiled by go
// vet, go build and go test.
package doccheck
