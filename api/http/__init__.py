"""api.http: the HTTP server of a broker: REST Proxy v3/v2 routes, produce paths, errors, metrics, OpenAPI."""
