// Package bench measures cerberus side by side with peer lock libraries on
// the same servers, in the same run. It is a module of its own so that the
// peers never enter the dependency graph of cerberus's users.
package bench
