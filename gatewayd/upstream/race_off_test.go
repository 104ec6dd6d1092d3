//go:build !race

package upstream

const raceOn = false
