"""Tests of the HTTP model providers against local fake servers."""
