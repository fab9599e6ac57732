// A known chain in a Go program built as `go build` builds it (DWARF,
// .debug_frame among it, compressed; no .eh_frame): main.main ->
// main.goDrive -> main.goLeaf. Runs for os.Args[1] seconds (default: until
// killed).
package main

import (
	"os"
	"strconv"
	"time"
)

//go:noinline
func goLeaf(n uint64) uint64 {
	acc := uint64(0)
	for i := uint64(0); i < n; i++ {
		acc += i*i ^ (acc >> 3)
	}
	return acc
}

//go:noinline
func goDrive(seconds float64) uint64 {
	end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	total := uint64(0)
	for seconds <= 0 || time.Now().Before(end) {
		total += goLeaf(5000000)
	}
	return total
}

func main() {
	seconds := 0.0
	if len(os.Args) > 1 {
		seconds, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	if goDrive(seconds) == 42 {
		os.Exit(1)
	}
}
