//go:build race

package openai

// raceOn: the race detector drops sync.Pool items at random, so allocation counts mean nothing under it.
const raceOn = true
