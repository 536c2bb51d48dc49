module phos.dev/phos

// 1.19: Debian bookworm's golang-go, what scripts/setup.sh installs. runtime/cgo.Handle needs 1.17.
go 1.19
