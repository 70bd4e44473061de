// Package bench holds end-to-end benchmarks of softrnic beside raw-socket baselines
// measured in the same run; results and the command that produced them are in README.md.
package bench
