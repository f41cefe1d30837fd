//! Test support: throwaway `redis-server` processes on free loopback ports.
