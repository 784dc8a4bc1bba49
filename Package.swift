// swift-tools-version:6.1
import PackageDescription

// Where it runs: Linux with glibc. imgw, the Mosquitto wrapper and the tests need it
// (CMosquitto's shims use epoll, eventfd, sock_diag and prctl; CProcessShims closefrom and
// close_range). The batched I/O hooks of CMosquittoIO are built for ELF on x86_64 and aarch64
// only, and libmosquitto's private layouts are used only with 2.0.x headers
// (`MosquittoLibrary.internals`); elsewhere both are left out and the public API is used.
// IMWire and IMClient use nothing Linux-specific; `platforms` gives their macOS minimum.
let package = Package(
    name: "IMGateway",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Mosquitto", targets: ["Mosquitto"]),
        .library(name: "IMWire", targets: ["IMWire"]),
        .library(name: "IMArchive", targets: ["IMArchive"]),
        .library(name: "IMGateway", targets: ["IMGateway"]),
        .executable(name: "imgw", targets: ["imgw"]),
        .library(name: "IMClient", targets: ["IMClient"]),
        .executable(name: "imcli", targets: ["imcli"]),
        .executable(name: "imbench", targets: ["imbench"]),
        .library(name: "FaultProxy", targets: ["FaultProxy"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-atomics.git", from: "1.3.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        .package(url: "https://github.com/hummingbird-project/swift-openapi-hummingbird.git", from: "2.1.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    ],
    targets: [
        // System libraries (apt providers so `swift build` names the missing package).
        .systemLibrary(
            name: "CMosquitto",
            pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // RocksDB's C API: only imbench links it (`imbench rocksdb`), imgw does not.
        .systemLibrary(
            name: "CRocksDB",
            pkgConfig: "rocksdb",
            providers: [.apt(["librocksdb-dev"])]
        ),

        // glibc's process and descriptor calls that need _GNU_SOURCE (closefrom in a
        // spawned child, pipe2).
        .target(name: "CProcessShims"),
        // Batched reads and writes for libmosquitto's sockets (hooks in libmosquitto's own GOT;
        // Linux ELF on x86_64 and aarch64, elsewhere `cmosq_io_install` says no).
        .target(name: "CMosquittoIO"),
        // HMAC-SHA256 over OpenSSL's SHA-256 without allocations (MessageAuthenticator).
        .target(name: "CMessageTag", linkerSettings: [.linkedLibrary("crypto")]),

        // The few concurrency primitives the gateway and the wrapper share (a monitor, a
        // semaphore, a serial job queue): an internal module of its own, not a product, with
        // its own tests; it depends on nothing.
        .target(name: "AsyncToolkit"),

        // Child processes (spawned with only stdin, stdout and stderr inherited, their output
        // read, their exit awaited): the embedded broker, PostgreSQL for the tests and imbench.
        .target(name: "ChildProcesses", dependencies: ["AsyncToolkit", "CProcessShims"]),

        // The libmosquitto wrapper: knows only CMosquitto (and the internal AsyncToolkit).
        .target(name: "Mosquitto", dependencies: ["CMosquitto", "CMosquittoIO", "AsyncToolkit"]),

        // The TLV wire protocol: knows only NIOCore and zlib.
        .target(
            name: "IMWire",
            dependencies: [
                "CZlib",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),

        // The server API's types, server and client, generated from docs/openapi.yaml by
        // swift-openapi-generator (`make openapi`; the generated code is committed).
        .target(
            name: "IMGatewayAPI",
            dependencies: [.product(name: "OpenAPIRuntime", package: "swift-openapi-runtime")],
            exclude: ["openapi-generator-config.yaml"]
        ),

        // What a gateway is configured with and names things by: its configuration file,
        // the topic layout, identifiers, development tokens, its version. Small (no MQTT, no
        // archive, no HTTP server), so that the command-line client links only this of it.
        .target(
            name: "IMGatewayConfig",
            dependencies: [
                "IMWire",
                .product(name: "Yams", package: "Yams"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ]
        ),

        // The message archive: every accepted chat stored before its ACK, with an offset per
        // recipient stream (SQLite through GRDB for one gateway, PostgreSQL for many). Knows
        // nothing of IMWire or MQTT: it stores bytes.
        .target(
            name: "IMArchive",
            dependencies: [
                "AsyncToolkit",
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's own API, to bind the commit's rows (GRDB's arguments cost more than
                // the inserts).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),

        // What imgw serves to browsers (the JavaScript client, the web chat page, the operator
        // console), compiled into the binary: files of its own, no dependency.
        .target(
            name: "IMWeb",
            resources: [
                .embedInCode("Resources/imclient.js"),
                .embedInCode("Resources/chat.html"), .embedInCode("Resources/chat.js"), .embedInCode("Resources/chat.css"),
                .embedInCode("Resources/console.html"), .embedInCode("Resources/console.js"), .embedInCode("Resources/console.css"),
            ]
        ),

        // The bridge: TLV clients on one side, one MQTT session per device on the other.
        .target(
            name: "IMGateway",
            dependencies: [
                "AsyncToolkit",
                "ChildProcesses",
                "IMGatewayConfig",
                "IMWeb",
                "IMWire",
                "IMArchive",
                "Mosquitto",
                "CProcessShims",
                "CMessageTag",
                "IMGatewayAPI",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "OpenAPIHummingbird", package: "swift-openapi-hummingbird"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        .executableTarget(
            name: "imgw",
            dependencies: [
                "IMGateway",
                "IMGatewayConfig",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // The client library: TLV over TCP with NIO; no libmosquitto, so apps can embed it.
        .target(
            name: "IMClient",
            dependencies: [
                "IMWire",
                // Internal: the concurrency primitives (as for Mosquitto).
                "AsyncToolkit",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        // A TCP proxy that injects latency, stalls, cuts and blackholes (no netem here):
        // the weak network of the integration tests and `imbench weak`.
        .target(
            name: "FaultProxy",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // A PostgreSQL server started as a child process (initdb in a temporary directory):
        // for the tests (through IMTestSupport) and the chaos run of imbench.
        .target(
            name: "LocalPostgres",
            dependencies: ["AsyncToolkit", "ChildProcesses"]
        ),
        // Benchmarks: the gateway against the direct MQTT path in the same run.
        .executableTarget(
            name: "imbench",
            dependencies: [
                "AsyncToolkit",
                "CMosquitto",
                // `imbench rocksdb`: the archive's lean records through RocksDB's C API.
                "CRocksDB",
                "LocalPostgres",
                "IMArchive",
                "IMGateway",
                "ChildProcesses",
                "IMGatewayConfig",
                "IMGatewayAPI",
                .product(name: "Atomics", package: "swift-atomics"),
                "IMClient",
                "IMWire",
                "Mosquitto",
                "FaultProxy",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                // `imbench group` sets up its groups through the server API.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
            ]
        ),
        // The command-line client: the client library, and of the gateway only its configuration,
        // topics and development tokens (no libmosquitto, GRDB, PostgresNIO or Hummingbird).
        .executableTarget(
            name: "imcli",
            dependencies: [
                "IMClient",
                "IMGatewayConfig",
                "IMGatewayAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
            ]
        ),

        .testTarget(name: "MosquittoTests", dependencies: ["Mosquitto", "CMosquittoIO"]),
        .testTarget(name: "AsyncToolkitTests", dependencies: ["AsyncToolkit"]),
        // The pure parts of imbench (the chaos run's checker and schedule).
        .testTarget(name: "imbenchTests", dependencies: ["imbench"]),
        .testTarget(
            name: "IMArchiveTests",
            dependencies: [
                "IMArchive",
                "IMTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            // An archive of each earlier schema that imgw wrote, and the script that made it.
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "FaultProxyTests",
            dependencies: [
                "FaultProxy",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "IMClientTests",
            dependencies: [
                "IMClient",
                "IMWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "IMGatewayTests",
            dependencies: [
                "IMGateway",
                "IMGatewayConfig",
                "IMArchive",
                "IMGatewayAPI",
                "IMWire",
                "Mosquitto",
                "CMosquitto",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "IMWireTests",
            dependencies: [
                "IMWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            resources: [.copy("Fixtures")]
        ),
        // Tests against real processes (mosquitto, ejabberd, PostgreSQL, imgw), started on free ports.
        // What the integration tests start and stop: brokers, PostgreSQL, devices, webhook
        // receivers, child processes, and the trait that stops them. Only test targets use it.
        .target(
            name: "IMTestSupport",
            dependencies: [
                "AsyncToolkit",
                "LocalPostgres",
                "Mosquitto",
                "CProcessShims",
                "IMWire",
                "IMGateway",
                "IMGatewayConfig",
                "ChildProcesses",
                "IMClient",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/IMTestSupport"
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "IMTestSupport",
                "AsyncToolkit",
                "Mosquitto",
                "CProcessShims",
                "IMWire",
                "IMGateway",
                "IMGatewayConfig",
                "ChildProcesses",
                "IMArchive",
                "IMClient",
                "FaultProxy",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ]
)
