// The gateway's configuration, topics, identifiers and development tokens live in the small
// IMGatewayConfig module (so that the command-line client links only them); they are part of
// this module's API, so whoever imports IMGateway gets them too.
@_exported import IMGatewayConfig
