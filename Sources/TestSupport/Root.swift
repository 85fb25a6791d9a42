import Foundation

/// Whether the tests run as root (CI does). A check that needs root is a
/// test of its own, enabled with `.enabled(if: isRoot, "needs root: …")`:
/// when not root it is reported as skipped, never an early `return` inside
/// a test that then counts as passed; and `scripts/test` under `CI=true`
/// fails when it runs as root and a test whose skip comment says "needs
/// root" was skipped.
public let isRoot: Bool = getuid() == 0
