package proc

import "runtime"

const goos = runtime.GOOS
