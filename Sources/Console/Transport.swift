import InventorySync

extension Session {
    /// A server that is not local and not reached with a verified
    /// certificate: a warning naming the risk, or with `--require-tls`
    /// (BEACONBENCH_REQUIRE_TLS=1) a refusal, exit 3, before anything is
    /// sent (docs/office.md, "TLS").
    func checkTransport(_ url: String) throws(ConsoleFailure) {
        guard let risk = ServerLocator.transportRisk(url) else { return }
        if invocation.requireTLS { throw ConsoleFailure(.infrastructure, "--require-tls: \(risk)") }
        terminal.warning(risk)
    }
}
