// Package freshread is the root of the module: it holds the version of
// the release (Version). The plugin is in package plugin, the position
// stores in package lsnstore; see the README.
package freshread
