// Package stdfile gives a process's stdin and stdout as files whose
// blocked reads and writes end when they are closed, so that a command
// that relays them (mcpvisor stdio, connect) can end while a read waits.
package stdfile
