internal import CDBus

/// The seam: every call into libdbus-1, and the macros Swift cannot import,
/// in one file (as swift-system's `Syscalls.swift` holds every system call).
///
/// The rest of the binding sees Swift types, `OpaquePointer`s for libdbus'
/// objects (`DBusConnection`, `DBusMessage`, `DBusWatch`, `DBusTimeout`) and
/// `LibDBus.MessageIter`; no `dbus_` identifier appears outside this file
/// (`LibDBusSeamTests` checks it). Each function is one libdbus call, named
/// after it (`dbus_message_get_type` is `messageGetType`), with C's
/// `dbus_bool_t` turned into `Bool`; the few that need a `DBusError` or free
/// what libdbus allocated do that here too, and nothing more. They are small
/// internal functions, inlined where they are called in a release build
/// (whole-module optimisation): the seam costs no call and no copy on the
/// hot path (decoding a signal's body).
enum LibDBus {
    /// `dbus_get_version`: the libdbus-1 linked in, as "1.14.10".
    static func version() -> String {
        var major: Int32 = 0
        var minor: Int32 = 0
        var micro: Int32 = 0
        dbus_get_version(&major, &minor, &micro)
        return "\(major).\(minor).\(micro)"
    }

    /// `DBUS_TYPE_STRING` and friends are written `((int) 's')` in
    /// `dbus-protocol.h`; the importer skips macros with casts, so the codes
    /// live here and nowhere else.
    enum TypeCode {
        static let invalid: Int32 = 0
        static let byte = Int32(UInt8(ascii: "y"))
        static let boolean = Int32(UInt8(ascii: "b"))
        static let int16 = Int32(UInt8(ascii: "n"))
        static let uint16 = Int32(UInt8(ascii: "q"))
        static let int32 = Int32(UInt8(ascii: "i"))
        static let uint32 = Int32(UInt8(ascii: "u"))
        static let int64 = Int32(UInt8(ascii: "x"))
        static let uint64 = Int32(UInt8(ascii: "t"))
        static let double = Int32(UInt8(ascii: "d"))
        static let string = Int32(UInt8(ascii: "s"))
        static let objectPath = Int32(UInt8(ascii: "o"))
        static let signature = Int32(UInt8(ascii: "g"))
        static let unixFD = Int32(UInt8(ascii: "h"))
        static let array = Int32(UInt8(ascii: "a"))
        static let variant = Int32(UInt8(ascii: "v"))
        /// `DBUS_TYPE_STRUCT` is `r` in iterators, `(` in signatures.
        static let structure = Int32(UInt8(ascii: "r"))
        /// `DBUS_TYPE_DICT_ENTRY` is `e` in iterators, `{` in signatures.
        static let dictEntry = Int32(UInt8(ascii: "e"))
    }

    enum MessageType {
        static let methodCall: Int32 = 1
        static let methodReturn: Int32 = 2
        static let error: Int32 = 3
        static let signal: Int32 = 4
    }

    enum WatchFlags {
        static let readable: UInt32 = 1
        static let writable: UInt32 = 2
        static let error: UInt32 = 4
        static let hangup: UInt32 = 8
    }

    /// Longest name libdbus accepts (`DBUS_MAXIMUM_NAME_LENGTH`).
    static let maximumNameLength = 255
    /// Longest signature (`DBUS_MAXIMUM_SIGNATURE_LENGTH`).
    static let maximumSignatureLength = 255

    /// libdbus' boolean (`dbus_bool_t`), as a message body holds it.
    typealias Boolean = dbus_bool_t
    /// A reading or writing position in a message body (`DBusMessageIter`),
    /// kept on the caller's stack.
    typealias MessageIter = DBusMessageIter
    /// libdbus' callbacks for the connection's watches and timeouts.
    typealias AddWatchFunction = DBusAddWatchFunction
    typealias RemoveWatchFunction = DBusRemoveWatchFunction
    typealias WatchToggledFunction = DBusWatchToggledFunction
    typealias AddTimeoutFunction = DBusAddTimeoutFunction
    typealias RemoveTimeoutFunction = DBusRemoveTimeoutFunction
    typealias TimeoutToggledFunction = DBusTimeoutToggledFunction

    // MARK: Process

    /// Calls `dbus_threads_init_default()` exactly once per process.
    static let threadsInitialised: Bool = {
        dbus_threads_init_default() != 0
    }()

    /// This machine's id (`dbus_try_get_local_machine_id`), nil when it has none.
    static func tryGetLocalMachineID() -> String? {
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let id = dbus_try_get_local_machine_id(&error) else { return nil }
        defer { dbus_free(id) }
        return String(cString: id)
    }

    // MARK: Names

    /// `dbus_validate_path`, after refusing NUL bytes.
    static func validatePath(_ string: String) -> Bool { validate(string, with: dbus_validate_path) }
    /// `dbus_validate_interface`, after refusing NUL bytes.
    static func validateInterface(_ string: String) -> Bool { validate(string, with: dbus_validate_interface) }
    /// `dbus_validate_member`, after refusing NUL bytes.
    static func validateMember(_ string: String) -> Bool { validate(string, with: dbus_validate_member) }
    /// `dbus_validate_bus_name`, after refusing NUL bytes.
    static func validateBusName(_ string: String) -> Bool { validate(string, with: dbus_validate_bus_name) }
    /// `dbus_validate_error_name`, after refusing NUL bytes.
    static func validateErrorName(_ string: String) -> Bool { validate(string, with: dbus_validate_error_name) }
    /// `dbus_signature_validate`, after refusing NUL bytes.
    static func signatureValidate(_ string: String) -> Bool { validate(string, with: dbus_signature_validate) }
    /// `dbus_signature_validate_single`, after refusing NUL bytes.
    static func signatureValidateSingle(_ string: String) -> Bool {
        validate(string, with: dbus_signature_validate_single)
    }

    /// Runs one of libdbus' `dbus_validate_*` / `dbus_signature_validate`
    /// functions on `string`, refusing first what libdbus would misread
    /// (interior NUL bytes).
    private static func validate(
        _ string: String,
        with check: (UnsafePointer<CChar>, UnsafeMutablePointer<DBusError>?) -> dbus_bool_t
    ) -> Bool {
        guard !string.utf8.contains(0) else { return false }
        return string.withCString { check($0, nil) } != 0
    }

    // MARK: Connections

    /// `dbus_connection_open_private`.
    /// - Throws: the error libdbus filled in, or `Failed` with `otherwise`.
    static func connectionOpenPrivate(_ address: String, otherwise: String) throws(BusError) -> OpaquePointer {
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let opened = dbus_connection_open_private(address, &error) else {
            throw BusError(libdbus: error, otherwise: otherwise)
        }
        return opened
    }

    /// `dbus_bus_register` (Hello).
    /// - Throws: the error libdbus filled in, or `Failed` with `otherwise`.
    static func busRegister(_ connection: OpaquePointer, otherwise: String) throws(BusError) {
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard dbus_bus_register(connection, &error) != 0 else { throw BusError(libdbus: error, otherwise: otherwise) }
    }

    /// Drives libdbus' authentication (`dbus_connection_read_write` while
    /// `dbus_connection_get_is_authenticated` is false) and nothing more:
    /// no message is queued yet, so the only bytes libdbus reads are the
    /// server's auth lines, and a bus sends nothing after them until it has
    /// received a message. The one place `read_write` is called: after it,
    /// the binding's own reader owns the socket's read side
    /// (`LibDBusSeamTests` keeps every other reading call out of the seam).
    /// - Returns: true once authenticated; false when the connection
    ///   dropped or `deadline` (monotonic nanoseconds) passed.
    static func authenticate(_ connection: OpaquePointer, deadline: UInt64) -> Bool {
        while dbus_connection_get_is_authenticated(connection) == 0 {
            guard dbus_connection_get_is_connected(connection) != 0, monotonicNanoseconds() < deadline else {
                return false
            }
            _ = dbus_connection_read_write(connection, 100)
        }
        return true
    }

    /// The socket (`dbus_connection_get_unix_fd`), -1 when there is none.
    /// libdbus keeps owning it and closes it in `dbus_connection_close`.
    static func connectionGetUnixFD(_ connection: OpaquePointer) -> Int32 {
        var fd: Int32 = -1
        guard dbus_connection_get_unix_fd(connection, &fd) != 0 else { return -1 }
        return fd
    }

    /// `dbus_connection_can_send_type(c, 'h')`: whether descriptor passing
    /// was negotiated.
    static func connectionCanPassDescriptors(_ connection: OpaquePointer) -> Bool {
        dbus_connection_can_send_type(connection, TypeCode.unixFD) != 0
    }

    static func connectionGetMaxMessageUnixFDs(_ connection: OpaquePointer) -> Int {
        dbus_connection_get_max_message_unix_fds(connection)
    }

    /// `dbus_bus_set_unique_name`: tells libdbus the name Hello's reply
    /// gave, when that reply was read by the binding.
    static func busSetUniqueName(_ connection: OpaquePointer, _ name: String) -> Bool {
        dbus_bus_set_unique_name(connection, name) != 0
    }

    /// `dbus_connection_get_dispatch_status` is `DBUS_DISPATCH_COMPLETE`:
    /// libdbus holds no message it read (always, once the binding reads).
    static func connectionDispatchIsComplete(_ connection: OpaquePointer) -> Bool {
        dbus_connection_get_dispatch_status(connection) == DBUS_DISPATCH_COMPLETE
    }

    static func busGetUniqueName(_ connection: OpaquePointer) -> String? {
        dbus_bus_get_unique_name(connection).map { String(cString: $0) }
    }

    static func connectionSetExitOnDisconnect(_ connection: OpaquePointer, _ exit: Bool) {
        dbus_connection_set_exit_on_disconnect(connection, exit ? 1 : 0)
    }

    static func connectionClose(_ connection: OpaquePointer) { dbus_connection_close(connection) }
    static func connectionUnref(_ connection: OpaquePointer) { dbus_connection_unref(connection) }

    static func connectionGetIsConnected(_ connection: OpaquePointer) -> Bool {
        dbus_connection_get_is_connected(connection) != 0
    }

    /// The next complete message read (a reference the caller releases), or nil.
    static func connectionPopMessage(_ connection: OpaquePointer) -> OpaquePointer? {
        dbus_connection_pop_message(connection)
    }

    /// Queues `message`; its serial, or nil when libdbus is out of memory.
    static func connectionSend(_ connection: OpaquePointer, _ message: OpaquePointer) -> UInt32? {
        var serial: UInt32 = 0
        guard dbus_connection_send(connection, message, &serial) != 0 else { return nil }
        return serial
    }

    static func connectionHasMessagesToSend(_ connection: OpaquePointer) -> Bool {
        dbus_connection_has_messages_to_send(connection) != 0
    }

    static func connectionSetWatchFunctions(
        _ connection: OpaquePointer, add: AddWatchFunction, remove: RemoveWatchFunction,
        toggled: WatchToggledFunction, data: UnsafeMutableRawPointer
    ) -> Bool {
        dbus_connection_set_watch_functions(connection, add, remove, toggled, data, nil) != 0
    }

    static func connectionSetTimeoutFunctions(
        _ connection: OpaquePointer, add: AddTimeoutFunction, remove: RemoveTimeoutFunction,
        toggled: TimeoutToggledFunction, data: UnsafeMutableRawPointer
    ) -> Bool {
        dbus_connection_set_timeout_functions(connection, add, remove, toggled, data, nil) != 0
    }

    // MARK: Watches and timeouts

    static func watchGetEnabled(_ watch: OpaquePointer) -> Bool { dbus_watch_get_enabled(watch) != 0 }
    static func watchGetFlags(_ watch: OpaquePointer) -> UInt32 { dbus_watch_get_flags(watch) }
    static func watchGetUnixFD(_ watch: OpaquePointer) -> Int32 { dbus_watch_get_unix_fd(watch) }
    static func watchHandle(_ watch: OpaquePointer, _ flags: UInt32) { _ = dbus_watch_handle(watch, flags) }

    static func timeoutGetEnabled(_ timeout: OpaquePointer) -> Bool { dbus_timeout_get_enabled(timeout) != 0 }
    /// Milliseconds.
    static func timeoutGetInterval(_ timeout: OpaquePointer) -> Int32 { dbus_timeout_get_interval(timeout) }
    static func timeoutHandle(_ timeout: OpaquePointer) { _ = dbus_timeout_handle(timeout) }

    // MARK: Messages

    static func messageRef(_ message: OpaquePointer) { _ = dbus_message_ref(message) }
    static func messageUnref(_ message: OpaquePointer) { dbus_message_unref(message) }

    static func messageGetType(_ message: OpaquePointer) -> Int32 { dbus_message_get_type(message) }
    static func messageGetSerial(_ message: OpaquePointer) -> UInt32 { dbus_message_get_serial(message) }
    static func messageGetReplySerial(_ message: OpaquePointer) -> UInt32 {
        dbus_message_get_reply_serial(message)
    }
    static func messageGetNoReply(_ message: OpaquePointer) -> Bool { dbus_message_get_no_reply(message) != 0 }
    static func messageIsSignal(_ message: OpaquePointer, _ interface: String, _ member: String) -> Bool {
        dbus_message_is_signal(message, interface, member) != 0
    }

    // Header fields, valid while the message is: the caller copies them.
    static func messageGetSender(_ message: OpaquePointer) -> UnsafePointer<CChar>? {
        dbus_message_get_sender(message)
    }
    static func messageGetDestination(_ message: OpaquePointer) -> UnsafePointer<CChar>? {
        dbus_message_get_destination(message)
    }
    static func messageGetPath(_ message: OpaquePointer) -> UnsafePointer<CChar>? { dbus_message_get_path(message) }
    static func messageGetInterface(_ message: OpaquePointer) -> UnsafePointer<CChar>? {
        dbus_message_get_interface(message)
    }
    static func messageGetMember(_ message: OpaquePointer) -> UnsafePointer<CChar>? {
        dbus_message_get_member(message)
    }
    static func messageGetErrorName(_ message: OpaquePointer) -> UnsafePointer<CChar>? {
        dbus_message_get_error_name(message)
    }
    static func messageGetSignature(_ message: OpaquePointer) -> UnsafePointer<CChar>? {
        dbus_message_get_signature(message)
    }

    static func messageNewMethodCall(
        _ destination: UnsafePointer<CChar>?, _ path: String, _ interface: UnsafePointer<CChar>?, _ member: String
    ) -> OpaquePointer? {
        dbus_message_new_method_call(destination, path, interface, member)
    }
    static func messageNewSignal(_ path: String, _ interface: String, _ member: String) -> OpaquePointer? {
        dbus_message_new_signal(path, interface, member)
    }
    static func messageNewMethodReturn(_ call: OpaquePointer) -> OpaquePointer? {
        dbus_message_new_method_return(call)
    }
    static func messageNewError(_ call: OpaquePointer, _ name: String, _ text: String) -> OpaquePointer? {
        dbus_message_new_error(call, name, text)
    }
    static func messageSetNoReply(_ message: OpaquePointer, _ noReply: Bool) {
        dbus_message_set_no_reply(message, noReply ? 1 : 0)
    }
    static func messageSetAutoStart(_ message: OpaquePointer, _ autoStart: Bool) {
        dbus_message_set_auto_start(message, autoStart ? 1 : 0)
    }

    /// `dbus_message_demarshal`: a message from its wire form, or nil when
    /// libdbus rejects the bytes.
    static func messageDemarshal(_ bytes: [UInt8]) -> OpaquePointer? {
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        return bytes.withUnsafeBufferPointer { buffer in
            buffer.baseAddress.map { base in
                base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                    dbus_message_demarshal($0, Int32(clamping: buffer.count), &error)
                }
            } ?? nil
        }
    }

    /// `dbus_message_demarshal` of bytes in place (one framed message of
    /// the reader's buffer): the message, or libdbus' reason for refusing.
    static func messageDemarshal(_ bytes: UnsafeRawBufferPointer) -> Result<OpaquePointer, BusError> {
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let base = bytes.baseAddress,
            let message = dbus_message_demarshal(
                base.assumingMemoryBound(to: CChar.self), Int32(clamping: bytes.count), &error)
        else {
            return .failure(BusError(libdbus: error, otherwise: "libdbus refused a message's bytes"))
        }
        return .success(message)
    }

    /// `dbus_message_demarshal_bytes_needed`: a message's length from its
    /// first bytes, 0 when fewer than 16, -1 when they cannot start one.
    static func messageDemarshalBytesNeeded(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress else { return 0 }
        return Int(
            dbus_message_demarshal_bytes_needed(
                base.assumingMemoryBound(to: CChar.self), Int32(clamping: bytes.count)))
    }

    /// `dbus_message_marshal`: the message's wire form, or nil when out of memory.
    static func messageMarshal(_ message: OpaquePointer) -> [UInt8]? {
        var buffer: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        guard dbus_message_marshal(message, &buffer, &length) != 0, let buffer else { return nil }
        defer { dbus_free(buffer) }
        return buffer.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            Array(UnsafeBufferPointer(start: $0, count: Int(length)))
        }
    }

    // MARK: Message bodies (the codec's hot path)

    @inline(__always)
    static func messageIterInitAppend(_ message: OpaquePointer, _ iter: inout MessageIter) {
        dbus_message_iter_init_append(message, &iter)
    }
    @inline(__always)
    static func messageIterAppendBasic(_ iter: inout MessageIter, _ code: Int32, _ value: UnsafeRawPointer) -> Bool {
        dbus_message_iter_append_basic(&iter, code, value) != 0
    }
    @inline(__always)
    static func messageIterAppendFixedArray(
        _ iter: inout MessageIter, _ code: Int32, _ elements: UnsafeRawPointer, _ count: Int32
    ) -> Bool {
        dbus_message_iter_append_fixed_array(&iter, code, elements, count) != 0
    }
    @inline(__always)
    static func messageIterOpenContainer(
        _ iter: inout MessageIter, _ code: Int32, _ contained: UnsafePointer<CChar>?, _ sub: inout MessageIter
    ) -> Bool {
        dbus_message_iter_open_container(&iter, code, contained, &sub) != 0
    }
    @inline(__always)
    static func messageIterCloseContainer(_ iter: inout MessageIter, _ sub: inout MessageIter) -> Bool {
        dbus_message_iter_close_container(&iter, &sub) != 0
    }
    @inline(__always)
    static func messageIterAbandonContainer(_ iter: inout MessageIter, _ sub: inout MessageIter) {
        dbus_message_iter_abandon_container(&iter, &sub)
    }

    @inline(__always)
    static func messageIterInit(_ message: OpaquePointer, _ iter: inout MessageIter) -> Bool {
        dbus_message_iter_init(message, &iter) != 0
    }
    @inline(__always)
    static func messageIterNext(_ iter: inout MessageIter) -> Bool { dbus_message_iter_next(&iter) != 0 }
    @inline(__always)
    static func messageIterGetArgType(_ iter: inout MessageIter) -> Int32 { dbus_message_iter_get_arg_type(&iter) }
    @inline(__always)
    static func messageIterGetBasic(_ iter: inout MessageIter, _ value: UnsafeMutableRawPointer) {
        dbus_message_iter_get_basic(&iter, value)
    }
    @inline(__always)
    static func messageIterRecurse(_ iter: inout MessageIter, _ sub: inout MessageIter) {
        dbus_message_iter_recurse(&iter, &sub)
    }
    @inline(__always)
    static func messageIterGetFixedArray(
        _ iter: inout MessageIter, _ elements: UnsafeMutableRawPointer, _ count: inout Int32
    ) {
        dbus_message_iter_get_fixed_array(&iter, elements, &count)
    }
    /// The signature under `iter` (libdbus' copy freed), nil when out of memory.
    @inline(__always)
    static func messageIterGetSignature(_ iter: inout MessageIter) -> String? {
        guard let signature = dbus_message_iter_get_signature(&iter) else { return nil }
        defer { dbus_free(signature) }
        return String(cString: signature)
    }
}

extension BusError {
    /// The error libdbus filled in, or `otherwise` when it filled in none.
    init(libdbus error: DBusError, otherwise: String) {
        if dbus_error_is_set_shim(error), let name = error.name {
            self.init(BusErrorName(String(cString: name)), error.message.map { String(cString: $0) } ?? otherwise)
        } else {
            self.init(.failed, otherwise)
        }
    }
}

private func dbus_error_is_set_shim(_ error: DBusError) -> Bool {
    error.name != nil
}

/// The libdbus-1 this binding runs on, for `beaconbench --version`.
public enum DBusLibrary {
    public static var version: String { LibDBus.version() }
}
