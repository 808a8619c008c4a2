//go:build !linux

package main

// dataFilesystem is only known on Linux (fsinfo_linux.go).
func dataFilesystem(string) string { return "" }
