//go:build !race

package openai

const raceOn = false
